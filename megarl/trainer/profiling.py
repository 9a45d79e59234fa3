"""`trainer.profile_steps` (verl's `global_profiler.steps`): the steps recorded with `trainer.profile_tool`.

For each step k it names, every worker process writes `{output_dir}/profile/step_k/rank_NNNNN.json` (a Chrome trace
of that process) or, with the `torch_memory` tool, `rank_NNNNN.memory.pickle` (its GPU allocator's history:
parallel/profiler.py), each rollout engine whose processes are its own (SGLang's schedulers)
writes `step_k/engine-TP-<rank>.trace.json.gz`, and the driver writes `step_k/timeline.json`, the step's phases (gen,
old_log_prob, ref, update_actor, ...) on the driver's wall clock, in the same format: open any of them in
https://ui.perfetto.dev or chrome://tracing."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from megarl.config.schema import TrainerConfig
from megarl.trainer.roles import Rollout
from parallel.controller import RoleHandle
from parallel.memory import Windows
from parallel.worker import Worker


class StepProfiler:
    def __init__(self, trainer: TrainerConfig, pools: tuple[RoleHandle[Any], ...], is_driver: bool,
                 rollout: Rollout | None = None):
        """`pools`: a role on each pool of processes to record; `rollout`: the rollout role, whose engines record
        their own processes (with torch's profiler: the allocator's history covers the worker processes only)."""
        self.steps, self.tool = set(trainer.profile_steps), trainer.profile_tool
        self.root, self.is_driver = Path(trainer.output_dir).expanduser() / "profile", is_driver
        self.pools = pools
        self.rollout = rollout if self.tool == "torch" else None

    def directory(self, step: int) -> Path:
        return self.root / f"step_{step}"

    @contextmanager
    def __call__(self, step: int) -> Iterator[None]:
        """Record the block on every worker process if `step` is profiled."""
        if step not in self.steps:
            yield
            return
        for pool in self.pools:
            pool.call(Worker.start_profile, self.tool)
        if self.rollout is not None:
            self.rollout.start_engine_profile(str(self.directory(step)))
        try:
            yield
        finally:
            if self.rollout is not None:
                self.rollout.stop_engine_profile()
            for pool in self.pools:
                pool.call(Worker.stop_profile, str(self.directory(step)))

    def write_timeline(self, step: int, windows: Windows) -> None:
        """The step's phases (`windows`: name → wall-clock start and end, s) as Chrome trace events."""
        if step not in self.steps or not self.is_driver:
            return
        start = min(begin for begin, _ in windows.values())
        events = [{"name": name, "ph": "X", "pid": "driver", "tid": "phases", "ts": (begin - start) * 1e6,
                   "dur": (end - begin) * 1e6} for name, (begin, end) in sorted(windows.items(), key=lambda w: w[1])]
        path = self.directory(step) / "timeline.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
