"""The RL roles (and the SFT role) as controller workers (parallel.worker.Worker): what each GPU's process hosts."""

from megarl.config.schema import MegatronConfig
from parallel import topology


def join_mesh(megatron: MegatronConfig, seed: int) -> None:
    """Build (or, for a role colocated with one that did, reuse) this process's megatron mesh."""
    topology.init_model_parallel(megatron.tensor_model_parallel_size, megatron.pipeline_model_parallel_size,
                                 megatron.context_parallel_size, seed=seed)
