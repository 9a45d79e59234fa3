"""A rollout engine beside the actor that dies mid-run (a scheduler process killed, out of memory, a GPU fault) is built
again, given the actor's current weights through the reshard layer, and the call it failed is run once more; a
second death in the same call stops the run with the cause. `rollout/engine_restarts` counts the restarts of the
run."""

from __future__ import annotations

from functools import partial
from typing import Callable, TypeVar

from megarl.rollout.base import EngineDied, EngineFailure
from megarl.workers.groups import ColocatedRolloutGroup
from megarl.workers.rollout import ColocatedRolloutWorker
from parallel.batch import Batch
from parallel.controller import Pending, RoleHandle, WorkerError

T = TypeVar("T")


class RecoveringRollout(ColocatedRolloutGroup):
    """The colocated rollout's ranks; `generate` (in flight too), `resume` and `sync_weights` recover from one engine
    death per call."""

    restarts: int  # the engine restarts of the run (`rollout/engine_restarts`)

    def __init__(self, handle: RoleHandle[ColocatedRolloutWorker], tell: Callable[[str], None]):
        super().__init__(handle)
        self.tell = tell
        self.restarts = 0

    def generate(self, prompts: Batch, validate: bool = False, greedy: bool = False,
                 seed: int | None = None) -> Batch:
        generate = partial(super().generate, prompts, validate, greedy, seed)
        return self._recovering("generate", generate, lambda _: generate())

    def generate_async(self, prompts: Batch, seed: int | None = None) -> Pending[Batch]:
        in_flight, generate = super().generate_async(prompts, seed), partial(super().generate, prompts, seed=seed)
        return Pending(lambda: self._recovering("generate", in_flight.result, lambda _: generate()))

    def resume(self, tags: list[str]) -> None:
        resume = partial(super().resume, tags)
        # A restarted engine has all its memory: the call again is a no-op.
        self._recovering("resume", resume, lambda _: resume())

    def sync_weights(self) -> dict[str, float]:
        return self._recovering("sync_weights", super().sync_weights, lambda synced: synced)

    def _recovering(self, method: str, call: Callable[[], T], after_restart: Callable[[dict[str, float]], T]) -> T:
        """`call()`; if the engine died in it, a restart and `after_restart(the restart's sync metrics)`."""
        try:
            return call()
        except WorkerError as e:
            if not e.raised(EngineDied):
                raise
            self.tell(f"rollout engine died during {method} on rank {e.rank} ({e.cause.partition(': ')[2]}); "
                      "restarting it with the actor's current weights and running the call again")
        self.restarts += 1
        synced = self.restart_engine()
        try:
            return after_restart(synced)
        except WorkerError as e:
            if e.raised(EngineDied):
                raise EngineFailure(f"the rollout engine died again during {method} right after a restart: "
                                    f"{e.cause.partition(': ')[2]}") from e
            raise
