"""Every empirical constant of the memory plan, in one place.

The rest of the plan is arithmetic on the model's shape and the recipe; these numbers stand for what that
arithmetic cannot see (CUDA contexts, allocator slack, the engine's own buffers, processes' host baselines).
`released_engine_gib`, `generation_workspace_gib` and `update_reserve_fraction` are fitted to the device-wide phase
peaks and the trainer's torch reservations of three Qwen3-8B-shaped runs (12 layers, TP 1, one H200, no/optimizer/all
offload: benchmarks/results/2026-11-23-memory.json); the others are first estimates, not yet measured.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30


def gib(value: float) -> int:
    """GiB → bytes."""
    return round(value * GIB)


@dataclass(frozen=True)
class Calibration:
    # One process's CUDA context with its cuBLAS workspaces and NCCL buffers. Each GPU has two such processes:
    # the trainer's worker (hosting every colocated role) and the SGLang scheduler of its engine rank.
    cuda_context_gib: float = 0.75
    # What a released SGLang engine still holds beyond its context: CUDA graphs, request-to-token pools, its
    # allocator's cache. Present in every phase (while generating too). Fitted: device-wide peak minus the trainer's
    # torch reservation in the log-prob phases, less two contexts.
    released_engine_gib: float = 3.6
    # The engine's activations, sampling buffers and request-to-token table while generating: outside
    # mem_fraction_static (SGLang leaves the other 1 - fraction of the free memory for them). Fitted: the scheduler
    # process's peak beside its weights, KV cache, context and released share.
    generation_workspace_gib: float = 2.3
    # Measured / modelled trainer activations: backward's temporaries, which the per-tensor formula
    # (megarl/plan/activations.py) does not count. An update measured alone matches the formula within 1 GiB.
    activation_scale: float = 1.0
    # What torch's allocator reserves in the RL loop's update beyond its live tensors (micro-batches of varied sizes,
    # the hybrid optimizer's side streams), as a fraction of the update's transient bytes. Fitted: 42.2 GiB reserved
    # against a 30.9 GiB peak of live tensors measured alone.
    update_reserve_fraction: float = 1.1
    # The log-prob function's vocabulary-sized fp32 temporaries: two chunks of megarl/models/logprobs.py's
    # CHUNK_BYTES (256 MiB) alive at once, whatever the token count.
    logprob_chunks_gib: float = 0.5
    # One weight-sync transfer bucket of parallel/reshard.py (512 MiB), plus the tensor that overflows it.
    sync_bucket_gib: float = 0.75
    # Host memory of one trainer worker process before any pinned copy: Python, torch, megatron, the Ray worker.
    host_worker_gib: float = 3.0
    # Host memory of one SGLang scheduler process (one per GPU).
    host_engine_gib: float = 2.0
    # The driver, on the first node only: the dataset, the tokenizer, Ray's head processes.
    host_driver_gib: float = 4.0
