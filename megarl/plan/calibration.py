"""Every empirical constant of the memory plan, in one place.

The rest of the plan is arithmetic on the model's shape and the recipe; these numbers stand for what that
arithmetic cannot see (memory outside torch's allocator, the engine's own buffers, processes' host baselines).
`trainer_process_gib`, `released_engine_gib` and `engine_runtime_gib` are measured, not fitted: they are
decompositions of the device-wide phase peaks (`memory/<phase>/peak_gb`), the trainer's torch reservation in the same
phases (`memory/<phase>/reserved_gb`) and each process's peak from nvidia-smi, in the seven runs that recorded all
three (benchmarks/results/2026-11-23-memory.json, 2026-11-23-lora-gpu.json, 2026-11-24-memory.json: Qwen3-8B shapes
of 6 and 12 layers and Qwen2.5-0.5B, on an H100 and an H200, a 24 GiB cap among them). docs/memory.md has the ranges.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30


def gib(value: float) -> int:
    """GiB → bytes."""
    return round(value * GIB)


@dataclass(frozen=True)
class Calibration:
    # The trainer's worker process's device memory outside torch's caching allocator: its CUDA context, NCCL's and
    # cuBLAS's buffers. Measured: the process's nvidia-smi peak less its peak torch reservation, 2.7-2.8 GiB in all
    # seven runs. It is there before the engine starts, so the engine's share of free memory is computed without it.
    trainer_process_gib: float = 2.8
    # On more than one GPU, NCCL's communicators (and in SGLang also its custom all-reduce buffers and its graphs'
    # collectives) hold memory outside torch's allocator in each process. Measured at tensor parallel 2 on two H100s
    # (benchmarks/results/2026-11-26-memory.json, Qwen3-8B shapes of 18 and 36 layers): after the engine's release
    # the device less the trainer's reservation was 7.2 and 7.5 GiB against 4.4-5.0 on one GPU; nvidia-smi's process
    # peaks put 0.6-0.8 GiB of the rise in the trainer's process and 1.6 GiB in the engine's. Data-parallel-only
    # layouts were not measured apart.
    trainer_collectives_gib: float = 0.7
    engine_collectives_gib: float = 1.6
    # The SGLang engine process's CUDA context (with what it allocates before measuring free memory): what it takes
    # from the free memory its share is a fraction of. Not measured apart from its released footprint.
    cuda_context_gib: float = 0.75
    # Everything a released SGLang engine process still holds, its context included: CUDA graphs, request pools,
    # its allocator's cache of generation buffers (torch_memory_saver releases only the weights and the KV cache).
    # Measured: device-wide peak less the trainer's reservation less `trainer_process_gib` in the phases after the
    # release, 2.1-2.3 GiB for the Qwen3-8B shapes, 1.7 GiB for Qwen2.5-0.5B.
    released_engine_gib: float = 2.2
    # What the resumed engine holds beyond its released footprint, weights and KV cache: the gen peak less all of
    # those and the trainer's memory, 0.5-0.9 GiB in six runs (0.2 in the LoRA run). The end of a sync, once the
    # KV cache is back, measured within 0.1 GiB of gen in every run, so it is no generation workspace.
    engine_runtime_gib: float = 0.75
    # Bytes per response and vocabulary entry of a batch SGLang decodes eagerly, above its CUDA graphs' largest batch
    # (megarl/plan/phases.py, _eager_decode): its logits, sampling and log-prob tensors. Measured in the one run that
    # decoded eagerly, Qwen3-0.6B GRPO as written (0.6b-tp2-as-written, 02cc2f5, benchmarks/results/
    # 2026-11-27-memory.json: 1,024 responses per engine, graphs to batch 64): gen's device-wide peak less the
    # trainer's reservation was 7.91 GiB above the plan's engine and processes. That run is no check of it.
    eager_decode_bytes_per_entry: float = 54.6
    # The caching allocator's blocks in an update beyond its live tensors, in blocks the size of the update's largest
    # tensor (the actor's logits; a critic's largest activation). Measured: reservation less the live tensors' peak
    # (memory/update_actor/reserved_gb less allocated_gb) in the updates whose rows sampled both and whose backward
    # sets the peak: 3.39 and 3.38 GiB against 3.43 GiB of logits (3.6B with optimizer offload, 3c047c9, and with
    # every offload, ab68815), 3.36 against 3.45 (Qwen3-0.6B GRPO as written, 02cc2f5), 3.67-4.16 against 3.28
    # (Qwen2.5-0.5B PPO, ab68815, 3421a59, 9721eb3): one block.
    update_cache_blocks: int = 1
    # Measured / modelled trainer activations: backward's temporaries, which the per-tensor formula
    # (megarl/plan/activations.py) does not count. Kept at 1.0: no run has measured activations apart from logits.
    activation_scale: float = 1.0
    # An update planned within this fraction of its GPU's memory may not fit: the plan's error bound (issue 41). The
    # largest shortfall of an update's plan in the rows that describe today's code (benchmarks/plan_check.py;
    # docs/memory.md) is 8.5 % (7.7 % at the run's micro-batches): all 36 layers of Qwen3-8B at TP 2 (31d96d7).
    update_shortfall: float = 0.10
    # One weight-sync transfer bucket of parallel/reshard.py (512 MiB), plus the tensor that overflows it.
    sync_bucket_gib: float = 0.75
    # Host memory of one trainer worker process before any pinned copy: Python, torch, megatron, the Ray worker.
    host_worker_gib: float = 3.0
    # Host memory of one SGLang scheduler process (one per GPU).
    host_engine_gib: float = 2.0
    # The driver, on the first node only: the dataset, the tokenizer, Ray's head processes.
    host_driver_gib: float = 4.0

    def trainer_process(self, gpus: int) -> int:
        """A worker process's bytes outside torch's allocator, in a world of `gpus` GPUs."""
        return gib(self.trainer_process_gib + (self.trainer_collectives_gib if gpus > 1 else 0.0))

    def released_engine(self, tensor_parallel: int) -> int:
        """A released engine process's bytes, its engine of `tensor_parallel` GPUs."""
        return gib(self.released_engine_gib + (self.engine_collectives_gib if tensor_parallel > 1 else 0.0))
