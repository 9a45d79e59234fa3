"""The RL roles (and the SFT role) as controller workers (parallel.worker.Worker): what each GPU's process hosts.
Each is built from its typed inputs (megarl/workers/inputs.py) and holds its megatron model as `self.model`
(a megarl.models.roles.RoleModel)."""

from abc import ABC, abstractmethod

from megarl.models.checkpoint import load_training_checkpoint, save_training_checkpoint
from megarl.models.roles import RoleModel
from megarl.workers.inputs import ModelSource
from parallel import topology
from parallel.batch import Batch
from parallel.dispatch import Collect, worker_method
from parallel.worker import Worker


def join_mesh(source: ModelSource) -> None:
    """Build (or, for a role colocated with one that did, reuse) this process's megatron mesh."""
    megatron = source.megatron
    topology.init_model_parallel(megatron.tensor_model_parallel_size, megatron.pipeline_model_parallel_size,
                                 megatron.context_parallel_size, seed=source.seed,
                                 ep=megatron.expert_model_parallel_size)


class TrainedWorker(Worker):
    """A role whose model is trained (`self.model`, a RoleModel with an optimizer): its training checkpoints."""

    model: RoleModel

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


class OneModelWorker(Worker, ABC):
    """The role of a one-model trainer (`megarl sft`, `megarl rm`): what megarl/trainer/one_model_loop.py calls."""

    @abstractmethod
    def train_batch(self, batch: Batch) -> dict[str, float]:
        """One optimizer step over the global batch; its metrics, identical on every rank (`Collect.AGREED`)."""

    @abstractmethod
    def eval_batch(self, batch: Batch) -> dict[str, float]:
        """This data-parallel rank's sums of the validation metrics, no update (`Collect.DP_LEADERS`)."""

    @abstractmethod
    def save_hf(self, out_dir: str) -> str:
        """Write the trained model as a HF checkpoint in `out_dir`; returns it (`Collect.RANK_ZERO`)."""
