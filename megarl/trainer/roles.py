"""The roles as the RL loop sees them: an interface per role (what the loop and its parts call), the weight-sync
strategy's, and the `Roles` of a run (megarl/trainer/spawn.py places them).

The interfaces are Protocols: the worker groups of megarl/workers/groups.py implement them (the weight syncs:
megarl/trainer/weight_sync.py), as may anything else that plays a role (a test's scripted rollout, another backend),
the type checker saying what is missing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from megarl.trainer.phases import Phase, untimed
from parallel.batch import Batch
from parallel.controller import Pending, RoleHandle


class Trained(Protocol):
    def save_checkpoint(self, path: str) -> list[str]: ...

    def load_checkpoint(self, path: str) -> None: ...


class Actor(Trained, Protocol):
    def compute_log_prob(self, batch: Batch) -> Batch: ...

    def update_actor(self, batch: Batch) -> dict[str, float]: ...

    def device_stats(self) -> list[dict[str, Any]]: ...


class Reference(Protocol):
    def compute_ref_log_prob(self, batch: Batch) -> Batch: ...


class Critic(Trained, Protocol):
    def compute_values(self, batch: Batch) -> Batch: ...

    def update_critic(self, batch: Batch) -> dict[str, float]: ...


class RewardModel(Protocol):
    def compute_rm_score(self, batch: Batch) -> Batch: ...


class Judge(Protocol):
    def judge(self, batch: Batch) -> Batch:
        """`judge_scores` and `judge_parsed` [B], and what the judge read and wrote (`judge_prompt`,
        `judge_output`)."""


class Rollout(Protocol):
    @property
    def restarts(self) -> int:
        """Engines built again after one died, in this run (`rollout/engine_restarts`)."""

    def generate(self, prompts: Batch, validate: bool = False, greedy: bool = False,
                 seed: int | None = None) -> Batch: ...

    def generate_async(self, prompts: Batch, seed: int | None = None) -> Pending[Batch]: ...

    def start_engine_profile(self, directory: str) -> None: ...

    def stop_engine_profile(self) -> None: ...


class WeightSync(Protocol):
    """How the actor's weights reach the engines, chosen once with the engines' placement; `phase(name)` times each
    part."""

    def release(self, phase: Phase) -> None:
        """After the step's generation: what the engines give to training."""

    def sync(self, phase: Phase = untimed) -> dict[str, float]:
        """The actor's current weights into the engines; the sync's `update_weights/*` metrics."""


@dataclass
class Roles:
    """The run's roles; the critic, the reference, the reward model and the judge are None when the recipe runs
    without them."""

    actor: Actor
    rollout: Rollout
    weights: WeightSync  # how the actor's weights reach the engines
    critic: Critic | None = None
    reference: Reference | None = None
    reward_model: RewardModel | None = None
    judge: Judge | None = None
    # One role per pool of processes: the trained roles' (the actor's, and the critic's when it has GPUs of its own),
    # whose steps are profiled, and with the reward model's own, whose memory peaks a step reports.
    trained_pools: tuple[RoleHandle[Any], ...] = ()
    model_pools: tuple[RoleHandle[Any], ...] = ()
