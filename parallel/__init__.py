"""Parallel runtime of megarl: process groups and megatron's training mesh (`topology`), worker groups on Ray or
under torchrun (`controller`, `worker`, `dispatch`, `ray_backend`, `spmd_backend`) and the `batch` they exchange,
where the colocated rollout engines run (`engines`) and how the actor's weights stream into them (`reshard`);
`cpu_compat` lets megatron run on CPU where a launcher places a pool there (tests, CI), and `seams` lists every
library member megarl replaces or overrides. It knows process groups and tensors, not models: parameter
names and their HF conversion come from megarl.models as callables. It never imports the trainer."""

from parallel.quiet import quiet_libraries

quiet_libraries()  # before megatron, transformers and datasets are imported (parallel/quiet.py)
