"""The RL roles (and the SFT role) as controller workers (parallel.worker.Worker): what each GPU's process hosts.
Each is built from its typed inputs (megarl/workers/inputs.py) and holds its megatron model as `self.model`
(a megarl.models.roles.RoleModel)."""

from megarl.models.checkpoint import load_training_checkpoint, save_training_checkpoint
from megarl.workers.inputs import ModelSource
from parallel import topology
from parallel.dispatch import Collect, worker_method
from parallel.worker import Worker


def join_mesh(source: ModelSource) -> None:
    """Build (or, for a role colocated with one that did, reuse) this process's megatron mesh."""
    megatron = source.megatron
    topology.init_model_parallel(megatron.tensor_model_parallel_size, megatron.pipeline_model_parallel_size,
                                 megatron.context_parallel_size, seed=source.seed)


class TrainedWorker(Worker):
    """A role whose model is trained (`self.model`, a RoleModel with an optimizer): its training checkpoints."""

    @worker_method(collect=Collect.RANK_ZERO)
    def save_checkpoint(self, path: str) -> list[str]:
        """Weights, optimizer, LR scheduler and RNG states into `path` (megarl/models/checkpoint.py); returns the
        files the checkpoint must hold, relative to `path`."""
        with self.model.weights_in_use():
            return save_training_checkpoint(self.model, path)

    @worker_method()
    def load_checkpoint(self, path: str) -> None:
        with self.model.weights_in_use():
            load_training_checkpoint(self.model, path)
