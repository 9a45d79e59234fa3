"""This machine's GPU and host memory, for the plan's defaults. The GPU's comes from nvidia-smi, never from CUDA:
initialising CUDA in the planner (or in `megarl train`'s driver) would take a context on GPU 0."""

from __future__ import annotations

import shutil
import subprocess

NVIDIA_SMI_TIMEOUT_S = 30


def gpu_memory_gib() -> float | None:
    """The smallest GPU's total memory in GiB (nvidia-smi reports MiB); None without nvidia-smi or without GPUs."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        result = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                                capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=True)
    except (OSError, subprocess.SubprocessError):
        return None  # a driver that does not answer: as good as no GPU for planning
    try:
        totals = [float(line) for line in result.stdout.split()]
    except ValueError:
        return None  # "[N/A]": a GPU that reports no memory (some virtual GPUs)
    return min(totals) / 1024 if totals else None


def host_memory_gib() -> float:
    import psutil

    return psutil.virtual_memory().total / (1 << 30)
