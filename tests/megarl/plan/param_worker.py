"""Parameters on each rank of tiny megatron models built by megarl from a config.json alone, in several layouts;
run under torchrun with 2 processes by test_shape.py.

usage: torchrun --nproc-per-node 2 param_worker.py OUT_JSON MODEL_DIR...
Rank 0 writes {model_dir: {"tp,pp,ep,value_head": [parameters on rank 0, on rank 1]}}. A mixture-of-experts model
(a config with experts) also at expert parallel 2, without pipeline parallelism and without a value head
(megarl has no MoE critic)."""

import json
import sys
from pathlib import Path

import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.utils import unwrap_model

from megarl.config.schema import MegatronConfig
from megarl.models.shapes import experts_of
from megarl.models.roles import build_frozen
from megarl.process_exit import exit_process
from parallel import cpu_compat, topology

LAYOUTS = ((1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2))  # (tp, pp, ep) over 2 ranks


def rank_parameters(model_dir: str, tp: int, pp: int, ep: int, value_head: bool) -> list[int]:
    role = build_frozen(model_dir, MegatronConfig(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                                  expert_model_parallel_size=ep), value_head=value_head)
    mine = sum(p.numel() for chunk in role.chunks for p in unwrap_model(chunk).parameters())
    counts = [None, None]
    dist.all_gather_object(counts, mine)
    return counts


def main(out: str, model_dirs: list[str]) -> None:
    cpu_compat.enable()  # a CPU test: megatron through the CPU shim
    topology.init_distributed()
    results: dict = {d: {} for d in model_dirs}
    for tp, pp, ep in LAYOUTS:
        topology.init_model_parallel(tp, pp, ep=ep)
        for model_dir in model_dirs:
            moe = experts_of(json.loads((Path(model_dir) / "config.json").read_text())) > 0
            # megatron's all-gather token dispatcher, the one that runs on CPU, refuses pipeline parallelism
            if (ep > 1 and not moe) or (pp > 1 and moe):
                continue
            for value_head in (False,) if moe else (False, True):
                results[model_dir][f"{tp},{pp},{ep},{value_head}"] = rank_parameters(model_dir, tp, pp, ep, value_head)
        parallel_state.destroy_model_parallel()
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    exit_process(main(sys.argv[1], sys.argv[2:]))
