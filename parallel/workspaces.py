"""cuBLAS's workspaces, taken before anything else in a worker process.

torch gives each cuBLAS handle a workspace (32 MiB on Hopper, `CUBLAS_WORKSPACE_CONFIG`) from its caching allocator
the first time the handle runs a GEMM on a stream, and keeps it for the life of the process. Handles are per thread,
and the autograd engine runs a CUDA backward on a thread of its own, so that thread's workspace came with the first
update's first backward GEMM (the output layer's input gradient): carved out of the free block the logits' gradient
had just left, it pinned that segment, several GiB, which `empty_cache` can hand back only when no live block is in it
(benchmarks/results/2026-12-07-memory.json's snapshot). Taken first, in a cache with no free blocks, each workspace
gets a segment of its own."""

from __future__ import annotations

import torch


def reserve_gemm_workspaces() -> None:
    """One GEMM forward (this thread's handle) and one backward (the autograd engine's device thread's handle) on
    the current device, before the process allocates anything large. A no-op without CUDA."""
    if not torch.cuda.is_available():
        return
    weight = torch.ones(16, 16, device="cuda", requires_grad=True)
    (weight @ weight).sum().backward()
