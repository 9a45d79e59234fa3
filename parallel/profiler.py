"""This process's torch profiler, started and stopped by the driver around the steps `trainer.profile_steps` names
(verl's `global_profiler.steps`). Each worker process writes one Chrome trace (Perfetto, chrome://tracing and
TensorBoard's profiler plugin open it): CPU ops, CUDA kernels where there is a GPU, and a range per role call
(`actor.update_actor`, ...: parallel/worker.py names them). Rollout engines that run in processes of their own
(SGLang's schedulers) are not in it."""

from __future__ import annotations

from pathlib import Path

import torch

_ACTIVE: torch.profiler.profile | None = None


def start() -> None:
    global _ACTIVE
    if _ACTIVE is not None:
        raise RuntimeError("the profiler is already recording in this process")
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    _ACTIVE = torch.profiler.profile(activities=activities)
    _ACTIVE.start()


def stop(path: str | Path) -> str:
    """End the recording and write it to `path` (a .json Chrome trace); returns the path."""
    global _ACTIVE
    if _ACTIVE is None:
        raise RuntimeError("the profiler is not recording in this process")
    profile, _ACTIVE = _ACTIVE, None
    profile.stop()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    profile.export_chrome_trace(str(path))
    return str(path)
