"""A rollout engine that dies mid-run (a scheduler process killed, out of memory, a GPU fault) is built again, given
the actor's current weights through the reshard layer, and the call it failed is run once more; a second death in
the same call stops the run with the cause. `rollout/engine_restarts` counts the restarts of the run."""

from __future__ import annotations

from typing import Any, Callable

from megarl.rollout.base import EngineDied
from parallel.controller import WorkerError


class EngineFailure(RuntimeError):
    """The rollout engine died again right after a restart."""


class RecoveringRollout:
    """The rollout role's handle; `generate`, `resume` and `sync_weights` recover from one engine death per call,
    every other worker method passes through."""

    def __init__(self, rollout, tell: Callable[[str], None]):
        self.rollout, self.tell = rollout, tell
        self.restarts = 0

    def generate(self, *args, **kwargs) -> Any:
        return self._recovering("generate", args, kwargs)

    def submit_generate(self, *args, **kwargs) -> Any:
        """A generation in flight (`.result()` when it is needed): engines on a pool of their own, not restarted."""
        return self.rollout.generate.submit(*args, **kwargs)

    def resume(self, tags: list[str]) -> None:
        self._recovering("resume", (tags,), {})  # a restarted engine has all its memory: the call again is a no-op

    def sync_weights(self) -> dict[str, float]:
        return self._recovering("sync_weights", (), {})

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rollout, name)

    def _recovering(self, method: str, args: tuple, kwargs: dict) -> Any:
        call = getattr(self.rollout, method)
        try:
            return call(*args, **kwargs)
        except WorkerError as e:
            if not e.raised(EngineDied):
                raise
            self.tell(f"rollout engine died during {method} on rank {e.rank} ({e.cause.partition(': ')[2]}); "
                      "restarting it with the actor's current weights and running the call again")
        self.restarts += 1
        sync_metrics = self.rollout.restart_engine()
        if method == "sync_weights":
            return sync_metrics
        try:
            return call(*args, **kwargs)
        except WorkerError as e:
            if e.raised(EngineDied):
                raise EngineFailure(f"the rollout engine died again during {method} right after a restart: "
                                    f"{e.cause.partition(': ')[2]}") from e
            raise
