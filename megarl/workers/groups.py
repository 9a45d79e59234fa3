"""The RL roles as the driver calls them: one class per role with an explicit method per worker method it uses, each a
call on the role's `RoleHandle` (parallel/controller.py) that names the worker method itself, so that "go to
definition" leads to the code that runs and the type checker holds the arguments against its signature. They
implement the role interfaces the RL loop is typed against (megarl/trainer/roles.py)."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from megarl.workers import TrainedWorker
from megarl.workers.actor import ActorWorker
from megarl.workers.critic import CriticWorker
from megarl.workers.judge import JudgeWorker
from megarl.workers.reference import ReferenceWorker
from megarl.workers.reward_model import RewardModelWorker
from megarl.workers.rollout import ColocatedRolloutWorker, PooledRolloutWorker, RolloutWorker
from megarl.workers.weight_sender import WeightSenderWorker
from parallel.batch import Batch
from parallel.controller import Pending, RoleHandle

W = TypeVar("W", bound=TrainedWorker)
R = TypeVar("R", bound=RolloutWorker)


class TrainedGroup(Generic[W]):
    """A trained role's ranks: their training checkpoints."""

    def __init__(self, handle: RoleHandle[W]):
        self.handle = handle

    def save_checkpoint(self, path: str) -> list[str]:
        return self.handle.call(TrainedWorker.save_checkpoint, path)

    def load_checkpoint(self, path: str) -> None:
        self.handle.call(TrainedWorker.load_checkpoint, path)


class ActorGroup(TrainedGroup[ActorWorker]):
    def compute_log_prob(self, batch: Batch) -> Batch:
        return self.handle.call(ActorWorker.compute_log_prob, batch)

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        """A LoRA actor is its own reference (its adapters disabled)."""
        return self.handle.call(ActorWorker.compute_ref_log_prob, batch)

    def update_actor(self, batch: Batch) -> dict[str, float]:
        return self.handle.call(ActorWorker.update_actor, batch)

    def device_stats(self) -> list[dict[str, Any]]:
        return self.handle.call(ActorWorker.device_stats)


class CriticGroup(TrainedGroup[CriticWorker]):
    def compute_values(self, batch: Batch) -> Batch:
        return self.handle.call(CriticWorker.compute_values, batch)

    def update_critic(self, batch: Batch) -> dict[str, float]:
        return self.handle.call(CriticWorker.update_critic, batch)


class ReferenceGroup:
    def __init__(self, handle: RoleHandle[ReferenceWorker]):
        self.handle = handle

    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        return self.handle.call(ReferenceWorker.compute_ref_log_prob, batch)


class RewardModelGroup:
    def __init__(self, handle: RoleHandle[RewardModelWorker]):
        self.handle = handle

    def compute_rm_score(self, batch: Batch) -> Batch:
        return self.handle.call(RewardModelWorker.compute_rm_score, batch)


class JudgeGroup:
    def __init__(self, handle: RoleHandle[JudgeWorker]):
        self.handle = handle

    def judge(self, batch: Batch) -> Batch:
        return self.handle.call(JudgeWorker.judge, batch)


class RolloutGroup(Generic[R]):
    """What the rollout's ranks do in either placement: generate, and profile the engine."""

    def __init__(self, handle: RoleHandle[R]):
        self.handle = handle

    def generate(self, prompts: Batch, validate: bool = False, greedy: bool = False,
                 seed: int | None = None) -> Batch:
        return self.handle.call(RolloutWorker.generate, prompts, validate=validate, greedy=greedy, seed=seed)

    def generate_async(self, prompts: Batch, seed: int | None = None) -> Pending[Batch]:
        """The generation in flight (engines on GPUs of their own generate while the trainer trains)."""
        return self.handle.submit(RolloutWorker.generate, prompts, seed=seed)

    def start_engine_profile(self, directory: str) -> None:
        self.handle.call(RolloutWorker.start_engine_profile, directory)

    def stop_engine_profile(self) -> None:
        self.handle.call(RolloutWorker.stop_engine_profile)


class ColocatedRolloutGroup(RolloutGroup[ColocatedRolloutWorker]):
    """Engines beside the actor: they hand their memory to training and back, and take the actor's weights."""

    def release(self) -> None:
        self.handle.call(ColocatedRolloutWorker.release)

    def resume(self, tags: list[str]) -> None:
        self.handle.call(ColocatedRolloutWorker.resume, tags)

    def sync_weights(self) -> dict[str, float]:
        return self.handle.call(ColocatedRolloutWorker.sync_weights)

    def restart_engine(self) -> dict[str, float]:
        return self.handle.call(ColocatedRolloutWorker.restart_engine)


class PooledRolloutGroup(RolloutGroup[PooledRolloutWorker]):
    """Engines on GPUs of their own: the weights come over the bridge, whose collectives both ends enter at once.
    Such an engine is not restarted (no actor beside it to stream the weights from): its death stops the run."""

    restarts = 0

    def join_bridge_async(self, host: str, port: int, size: int, timeout_s: float) -> Pending[None]:
        return self.handle.submit(PooledRolloutWorker.join_bridge, host, port, size, timeout_s)

    def receive_weights_async(self) -> Pending[dict[str, float]]:
        return self.handle.submit(PooledRolloutWorker.receive_weights)

    def idle(self) -> None:
        self.handle.call(PooledRolloutWorker.idle)


class WeightSenderGroup:
    """The actor's end of the weight bridge."""

    def __init__(self, handle: RoleHandle[WeightSenderWorker]):
        self.handle = handle

    def bridge_address(self) -> tuple[str, int]:
        return self.handle.call(WeightSenderWorker.bridge_address)

    def join_bridge_async(self, host: str, port: int, size: int, timeout_s: float) -> Pending[None]:
        return self.handle.submit(WeightSenderWorker.join_bridge, host, port, size, timeout_s)

    def send_weights_async(self) -> Pending[dict[str, float]]:
        return self.handle.submit(WeightSenderWorker.send_weights)
