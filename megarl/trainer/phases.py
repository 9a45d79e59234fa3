"""A step's phases (gen, old_log_prob, update_weights, ...): each timed as `timing_s/{name}`, and its wall-clock span
kept for the step's memory peaks and its profiled timeline. A part of the loop that has phases takes `phase(name)`, a
context that times the block."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Callable, Iterator

from parallel.memory import Windows

Phase = Callable[[str], AbstractContextManager]


@contextmanager
def timed(metrics: dict[str, float], name: str, windows: Windows | None = None) -> Iterator[None]:
    """`timing_s/{name}`, added up over the phase's visits (dynamic sampling generates and scores in rounds); with
    `windows`, also the wall-clock span (time.time(), the clock of the workers' memory samples) from the first
    visit's start to the last one's end, under `name`."""
    start, wall_start = time.perf_counter(), time.time()
    yield
    key = f"timing_s/{name}"
    metrics[key] = metrics.get(key, 0.0) + time.perf_counter() - start
    if windows is not None:
        windows[name] = (windows.get(name, (wall_start,))[0], time.time())


def untimed(name: str) -> AbstractContextManager:
    """A phase outside any step (the sync after a checkpoint's load): not timed."""
    return nullcontext()
