"""A role for the controller tests: one tiny distributed training step of a megatron actor (TP over the
worker group), and hooks to probe placement, NCCL/gloo and failure reporting."""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from megarl.config.schema import MegatronConfig, OptimConfig
from megarl.models.logprobs import vocab_parallel_logprobs_and_entropy
from megarl.models.packing import pack_sequences
from megarl.models.roles import build_actor
from parallel import topology
from parallel.batch import Batch
from parallel.dispatch import Collect, Dispatch, worker_method
from parallel.worker import Worker


def _padded(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    out = torch.zeros(len(rows), width)
    for i, row in enumerate(rows):
        out[i, : row.numel()] = row.float()
    return out


class TinyStepWorker(Worker):
    def __init__(self, model_dir: str, tp: int):
        topology.init_model_parallel(tp=tp)
        megatron = MegatronConfig(tensor_model_parallel_size=tp)
        optim = OptimConfig(lr=1e-2, weight_decay=0.0)
        self.actor = build_actor(model_dir, megatron, optim, total_steps=1, bf16=torch.cuda.is_available())

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    def step(self, batch: Batch) -> Batch:
        """Log-probs, one optimizer step on the mean negative log-likelihood, log-probs again; the step's
        `grad_norm` and `loss` repeated per sample (float64: exactly the floats the step returned)."""
        sequences = [ids[:n] for ids, n in zip(batch["input_ids"], batch["lengths"].tolist())]
        everything = [list(range(len(sequences)))]
        before = self.actor.logprobs(sequences, everything)["logprobs"]
        tokens = sum(len(s) for s in sequences)

        def loss_fn(logits, packed):
            logprobs, _ = vocab_parallel_logprobs_and_entropy(logits, packed.labels)
            loss = -logprobs.float().sum() / tokens
            return loss, {"loss": loss}

        metrics = self.actor.train_step([pack_sequences(sequences, device=self.actor.device)], loss_fn)
        after = self.actor.logprobs(sequences, everything)["logprobs"]
        width = batch["input_ids"].shape[1]
        step = {k: torch.full((len(sequences),), metrics[k], dtype=torch.float64) for k in ("grad_norm", "loss")}
        return Batch({"logprobs_before": _padded(before, width), "logprobs_after": _padded(after, width), **step})

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    def logprobs(self, batch: Batch) -> Batch:
        sequences = [ids[:n] for ids, n in zip(batch["input_ids"], batch["lengths"].tolist())]
        logprobs = self.actor.logprobs(sequences, [list(range(len(sequences)))])["logprobs"]
        return Batch({"logprobs": _padded(logprobs, batch["input_ids"].shape[1])})

    @worker_method()
    def describe(self) -> dict:
        device = torch.cuda.current_device() if torch.cuda.is_available() else None
        return {
            "rank": dist.get_rank(), "world_size": dist.get_world_size(), "backend": dist.get_backend(),
            "local_rank": os.environ.get("LOCAL_RANK"), "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
            "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "device": device,
            "device_count": torch.cuda.device_count(),
            "gpu_uuid": str(torch.cuda.get_device_properties(device).uuid) if device is not None else None,
        }

    @worker_method(collect=Collect.RANK_ZERO)
    def all_reduce(self) -> float:
        value = torch.tensor([float(dist.get_rank() + 1)], device=self.actor.device)
        dist.all_reduce(value)
        return value.item()

    @worker_method(collect=Collect.RANK_ZERO)
    def all_reduce_bus_bandwidth(self, megabytes: int = 256, iters: int = 10) -> float:
        """GB/s of bus bandwidth (nccl-tests' definition: 2(n−1)/n × bytes / time) for a bf16 all-reduce."""
        value = torch.ones(megabytes * 2**19, dtype=torch.bfloat16, device=self.actor.device)
        dist.all_reduce(value)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(value)
        torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / iters
        n = dist.get_world_size()
        return 2 * (n - 1) / n * value.numel() * 2 / seconds / 1e9

    @worker_method()
    def fail_on(self, rank: int, how: str) -> None:
        """Rank `rank` raises (or its process exits); the others wait in a collective it never joins."""
        if dist.get_rank() == rank and how == "exit":
            os._exit(3)
        if dist.get_rank() == rank:
            raise RuntimeError(f"deliberate failure on rank {rank}")
        dist.barrier()
