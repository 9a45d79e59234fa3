"""`trainer.profile_steps` (verl's `global_profiler.steps`): the steps recorded with torch's profiler.

For each step k it names, every worker process writes `{output_dir}/profile/step_k/rank_NNNNN.json` (a Chrome trace
of that process: parallel/profiler.py), each rollout engine whose processes are its own (SGLang's schedulers)
writes `step_k/engine-TP-<rank>.trace.json.gz`, and the driver writes `step_k/timeline.json`, the step's phases (gen,
old_log_prob, ref, update_actor, ...) on the driver's wall clock, in the same format: open any of them in
https://ui.perfetto.dev or chrome://tracing."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path


class StepProfiler:
    def __init__(self, steps, output_dir: str, groups: list, is_driver: bool, rollout=None):
        """`groups`: the roles whose processes are recorded (one call per pool); `rollout`: the rollout role, whose
        engines record their own processes."""
        self.steps, self.root, self.is_driver = set(steps), Path(output_dir).expanduser() / "profile", is_driver
        self.rollout = rollout
        pools: dict[int, object] = {}
        for handle in groups:  # one call per pool of processes (colocated roles share theirs)
            pools.setdefault(id(handle.group), handle)
        self.groups = list(pools.values())

    def directory(self, step: int) -> Path:
        return self.root / f"step_{step}"

    @contextmanager
    def __call__(self, step: int):
        """Record the block on every worker process if `step` is profiled."""
        if step not in self.steps:
            yield
            return
        for group in self.groups:
            group.start_profile()
        if self.rollout is not None:
            self.rollout.start_engine_profile(str(self.directory(step)))
        try:
            yield
        finally:
            if self.rollout is not None:
                self.rollout.stop_engine_profile()
            for group in self.groups:
                group.stop_profile(str(self.directory(step)))

    def write_timeline(self, step: int, windows: dict[str, tuple[float, float]]) -> None:
        """The step's phases (`windows`: name → wall-clock start and end, s) as Chrome trace events."""
        if step not in self.steps or not self.is_driver:
            return
        start = min(begin for begin, _ in windows.values())
        events = [{"name": name, "ph": "X", "pid": "driver", "tid": "phases", "ts": (begin - start) * 1e6,
                   "dur": (end - begin) * 1e6} for name, (begin, end) in sorted(windows.items(), key=lambda w: w[1])]
        path = self.directory(step) / "timeline.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
