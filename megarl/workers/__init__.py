"""The RL roles (and the SFT role) as controller workers (parallel.worker.Worker): what each GPU's process hosts."""

from megarl.config.schema import MegatronConfig
from megarl.models.checkpoint import load_training_checkpoint, save_training_checkpoint
from parallel import topology
from parallel.dispatch import worker_method
from parallel.worker import Worker


def join_mesh(megatron: MegatronConfig, seed: int) -> None:
    """Build (or, for a role colocated with one that did, reuse) this process's megatron mesh."""
    topology.init_model_parallel(megatron.tensor_model_parallel_size, megatron.pipeline_model_parallel_size,
                                 megatron.context_parallel_size, seed=seed)


class TrainedWorker(Worker):
    """A role whose model is trained (`self.role`, a RoleModel with an optimizer): its training checkpoints."""

    @worker_method()
    def save_checkpoint(self, path: str) -> None:
        """Weights, optimizer, LR scheduler and RNG states into `path` (megarl/models/checkpoint.py)."""
        save_training_checkpoint(self.role, path)

    @worker_method()
    def load_checkpoint(self, path: str) -> None:
        load_training_checkpoint(self.role, path)
