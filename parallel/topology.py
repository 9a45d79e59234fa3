"""Process groups: the default group from torchrun's environment, and megatron's training mesh
(tensor × pipeline × context parallel over data parallel)."""

from __future__ import annotations

import datetime
import os
import random
import socket
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch
import torch.distributed as dist
from megatron.core import parallel_state, tensor_parallel


def free_port() -> int:
    """A TCP port free on this host now, for a rendezvous or an engine to bind next."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def process_group_of(mine: Sequence[int], rank_sets: Iterable[Sequence[int]], backend: str | None = None):
    """Create one process group per distinct rank set (every rank calls this with the same sets: group creation
    is collective) and return the one of `mine`; None for a set of one rank."""
    found = None
    for ranks in sorted({tuple(r) for r in rank_sets}):
        group = dist.new_group(list(ranks), backend=backend) if len(ranks) > 1 else None
        if ranks == tuple(mine):
            found = group
    return found


@dataclass(frozen=True)
class Rendezvous:
    """A default process group of `world` ranks on `store` (one pool of a torchrun job of several pools), where
    torchrun's variables describe the whole job."""

    store: dist.Store
    rank: int
    world: int


def init_distributed(timeout_s: float = 600.0, rendezvous: Rendezvous | None = None) -> None:
    """Join the default process group (NCCL with CUDA, gloo otherwise) from torchrun's env variables (or
    `rendezvous`), or as a group of one when started without torchrun. Collectives time out after `timeout_s`, so
    a dead rank fails the job instead of hanging it. The GPU is LOCAL_RANK's either way."""
    if dist.is_initialized():
        return
    if "WORLD_SIZE" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_port()))
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    timeout, backend = datetime.timedelta(seconds=timeout_s), "nccl" if cuda else "gloo"
    if rendezvous is None:
        dist.init_process_group(backend, timeout=timeout)
    else:
        dist.init_process_group(backend, store=rendezvous.store, rank=rendezvous.rank, world_size=rendezvous.world,
                                timeout=timeout)


def init_model_parallel(tp: int = 1, pp: int = 1, cp: int = 1, seed: int = 1, ep: int = 1) -> None:
    """Build megatron's mesh over the default group, seed the process's generators as Megatron-LM does (Python's and
    numpy's start from OS entropy otherwise, so two runs of a recipe, or a run and its resumption from a checkpoint,
    would not draw the same numbers) and megatron's per-rank RNG streams. megatron keeps one mesh
    per process, so roles colocated in a process share it: asking again for the same mesh is a no-op,
    asking for another is an error. `ep`: expert parallelism (a mixture-of-experts model's experts split over `ep`
    ranks of the data-parallel ones)."""
    if parallel_state.model_parallel_is_initialized():
        have = (parallel_state.get_tensor_model_parallel_world_size(),
                parallel_state.get_pipeline_model_parallel_world_size(),
                parallel_state.get_context_parallel_world_size(),
                parallel_state.get_expert_model_parallel_world_size())
        if have != (tp, pp, cp, ep):
            raise ValueError(
                f"this process already has a megatron mesh with TP={have[0]} PP={have[1]} CP={have[2]} EP={have[3]}; "
                f"a role asking for TP={tp} PP={pp} CP={cp} EP={ep} must run in its own resource pool"
            )
        return
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, context_parallel_size=cp,
        expert_model_parallel_size=ep,
    )
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    tensor_parallel.model_parallel_cuda_manual_seed(seed)


def destroy() -> None:
    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()
