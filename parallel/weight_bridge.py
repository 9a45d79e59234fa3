"""Weights from the trainer's pool to rollout engines on GPUs of their own (`rollout.enable_resource_pool`): a process
group of its own joins the actor's first rank (the sender, bridge rank 0) and every rank of the rollout pool,
outside either pool's torch.distributed world (each pool is one), rendezvousing on a TCPStore at the sender.

The sender broadcasts the actor's weights in buckets of bounded size, as full HF-named tensors (gathered over the
actor's tensor- and pipeline-parallel ranks by the reshard layer, with each tensor's tensor-parallel dim), each
bucket after a header that names its tensors; every engine rank keeps its own slice. Headers travel over gloo;
the tensors over NCCL from GPU to GPU when every end has one (the SGLang engines' pool), else over gloo in host
memory (the transformers engine on CPU).
"""

from __future__ import annotations

import datetime
from typing import Iterator

import torch
import torch.distributed as dist

from parallel.objects import object_tensor, tensor_object
from parallel.reshard import Part

Header = list[tuple[str, tuple[int, ...], torch.dtype, "int | None"]]  # name, shape, dtype, tensor-parallel dim


class WeightBridge:
    """One end of the bridge: the sender (`rank` 0) or engine rank `rank - 1`."""

    def __init__(self, host: str, port: int, rank: int, size: int, timeout_s: float):
        timeout = datetime.timedelta(seconds=timeout_s)
        self.rank = rank
        self.store = dist.TCPStore(host, port, size, rank == 0, timeout=timeout)
        self.control = dist.ProcessGroupGloo(dist.PrefixStore("control", self.store), rank, size, timeout)
        self.device = _agreed_device(self.control, size)
        self.payload = self.control if self.device.type == "cpu" else dist.ProcessGroupNCCL(
            dist.PrefixStore("payload", self.store), rank, size, timeout)

    def send(self, bucket: list[Part]) -> int:
        """On the sender: one bucket (full tensors); returns the bytes sent."""
        header: Header = [(name, tuple(t.shape), t.dtype, dim) for name, t, dim in bucket]
        self._broadcast_object(header)
        sent = 0
        for _, tensor, _ in bucket:
            payload = tensor.detach().to(self.device, copy=False).contiguous()
            self._broadcast(payload)
            sent += payload.numel() * payload.element_size()
        return sent

    def finish(self) -> None:
        """On the sender: the end of this sync's stream."""
        self._broadcast_object(None)

    def receive(self, part: int, parts: int) -> Iterator[list[Part]]:
        """On an engine rank: each bucket of the sync, every tensor cut to slice `part` of `parts` on its dim."""
        while (header := self._broadcast_object(None)) is not None:
            bucket = []
            for name, shape, dtype, dim in header:
                tensor = torch.empty(shape, dtype=dtype, device=self.device)
                self._broadcast(tensor)
                if dim is not None and parts > 1:
                    tensor = tensor.chunk(parts, dim=dim)[part].contiguous()
                bucket.append((name, tensor, dim))
            yield bucket

    def _broadcast(self, tensor: torch.Tensor, group=None) -> None:
        options = dist.BroadcastOptions()
        options.rootRank = 0
        (self.payload if group is None else group).broadcast([tensor], options).wait()

    def _broadcast_object(self, value):
        payload = object_tensor(value) if self.rank == 0 else None
        length = torch.tensor([payload.numel() if payload is not None else 0], dtype=torch.int64)
        self._broadcast(length, self.control)
        if payload is None:
            payload = torch.empty(int(length.item()), dtype=torch.uint8)
        self._broadcast(payload, self.control)
        return tensor_object(payload)


def _agreed_device(control, size: int) -> torch.device:
    """This end's GPU where every end has one (NCCL joins them), else host memory (gloo). An end without a GPU
    facing ends with one is a placement error, said on every end rather than left to hang a broadcast."""
    has_gpu = torch.cuda.is_available()
    mine = torch.tensor([int(has_gpu)], dtype=torch.int64)
    every = [torch.empty_like(mine) for _ in range(size)]
    control.allgather([every], [mine]).wait()
    flags = [int(flag) for flag in every]
    if len(set(flags)) > 1:
        without = [rank for rank, flag in enumerate(flags) if not flag]
        raise RuntimeError(f"the weight bridge's ends {without} (0: the actor's first rank, k: rollout rank k - 1) "
                           "have no GPU while the others have: give the actor and the rollout pool GPUs alike")
    return torch.device("cuda", torch.cuda.current_device()) if has_gpu else torch.device("cpu")
