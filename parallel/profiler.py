"""This process's profiler, started and stopped by the driver around the steps `trainer.profile_steps` names
(verl's `global_profiler.steps`), with the tool `trainer.profile_tool` names (verl's `global_profiler.tool`):
- `torch`: torch's profiler. Each worker process writes one Chrome trace (Perfetto, chrome://tracing and
  TensorBoard's profiler plugin open it): CPU ops, CUDA kernels where there is a GPU, and a range per role call
  (`actor.update_actor`, ...: parallel/worker.py names them).
- `torch_memory`: the CUDA caching allocator's history (every allocation and free, with its Python stack) and its
  segments at the end, as a snapshot that https://pytorch.org/memory_viz opens and benchmarks/memory_snapshot.py
  summarises: which live blocks keep the allocator's cached memory from being handed back. It records the GPU's
  allocator only: a process without CUDA writes no snapshot.
Rollout engines that run in processes of their own (SGLang's schedulers) are in neither."""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

PROFILE_TOOLS = ("torch", "torch_memory")
# Allocation events kept by torch_memory (verl's trace_alloc_max_entries): the last ones of a long step.
MEMORY_EVENTS = 200_000

_ACTIVE: torch.profiler.profile | str | None = None


def start(tool: str = "torch") -> None:
    global _ACTIVE
    if _ACTIVE is not None:
        raise RuntimeError("the profiler is already recording in this process")
    if tool not in PROFILE_TOOLS:
        raise ValueError(f"profile tool {tool!r} is none of {', '.join(PROFILE_TOOLS)}")
    if tool == "torch_memory":
        if torch.cuda.is_available():
            torch.cuda.memory._record_memory_history(max_entries=MEMORY_EVENTS, stacks="python")
        _ACTIVE = tool
        return
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    recording = torch.profiler.profile(activities=activities)
    recording.start()
    _ACTIVE = recording


def stop(directory: str | Path, rank: int) -> str | None:
    """End the recording and write it to `directory`: rank_NNNNN.json (a Chrome trace) or
    rank_NNNNN.memory.pickle (an allocator snapshot); returns the path, None where there was nothing to record."""
    global _ACTIVE
    if _ACTIVE is None:
        raise RuntimeError("the profiler is not recording in this process")
    active, _ACTIVE = _ACTIVE, None
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if active == "torch_memory":
        if not torch.cuda.is_available():
            return None
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        path = directory / f"rank_{rank:05d}.memory.pickle"
        path.write_bytes(pickle.dumps(snapshot))
        return str(path)
    assert isinstance(active, torch.profiler.profile)
    active.stop()
    path = directory / f"rank_{rank:05d}.json"
    active.export_chrome_trace(str(path))
    return str(path)
