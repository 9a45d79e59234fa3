"""The torchrun backend: every process runs the driver code (SPMD) and hosts its own rank's roles.

A call runs the local rank's part, then the wanted results are all-gathered over a gloo group, so every
rank's driver holds the same collected value and takes the same next step. Ray is never imported.
"""

from __future__ import annotations

import datetime
import os
import pickle
import socket
from typing import Sequence

import torch
import torch.distributed as dist

from parallel.controller import PoolSpec, WorkerGroup, raise_if_failed
from parallel.topology import Rendezvous
from parallel.worker import WorkerHost


class SpmdWorkerGroup(WorkerGroup):
    def __init__(self, pool: PoolSpec, timeout_s: float, rendezvous: Rendezvous | None = None):
        """`rendezvous`: the pool's own world, in a torchrun job of several pools (parallel/served_backend.py)."""
        world = rendezvous.world if rendezvous else int(os.environ.get("WORLD_SIZE", "1"))
        if world != pool.world_size:
            raise ValueError(
                f"torchrun started {world} processes but pool {pool.name!r} has {pool.world_size} GPUs "
                "(trainer.nnodes × trainer.n_gpus_per_node): make them equal"
            )
        self.pool = pool
        self.host = WorkerHost(rendezvous.rank if rendezvous else int(os.environ.get("RANK", "0")), world)
        raise_if_failed(self.host.run("join", False, {}, timeout_s, rendezvous, without_gpu()), ("host", "join"),
                        self.host.rank, process_where())
        self.rank = dist.get_rank()
        self.control = (
            dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s)) if world > 1 else None
        )

    def run(self, what: str, per_rank: Sequence[tuple], wanted: Sequence[bool], label: tuple[str, str]) -> list:
        """A failure is raised at once on its rank (another rank may wait for it in a collective: torchrun ends the
        job when this process exits). A RecoverableError's outcome is gathered like a result, so every rank raises
        it alike and the driver code may recover (e.g. from a dead rollout engine)."""
        mine = self.host.run(what, wanted[self.rank], *per_rank[self.rank])
        if self.control is None or mine[0] == "error":
            return [raise_if_failed(mine, label, self.rank, process_where())]
        gathered: list = [None] * self.world_size
        dist.all_gather_object(gathered, (mine, process_where()), group=self.control)
        return [raise_if_failed(outcome, label, rank, where) for rank, (outcome, where) in enumerate(gathered)]

    def from_driver(self, fn):
        """Rank 0 computes `fn()` and broadcasts the result, or the exception it raised, which every rank raises."""
        if self.control is None:
            return fn()
        holder, failure = [None], None
        if self.rank == 0:
            try:
                holder[0] = ("ok", fn())
            except Exception as e:
                failure, holder[0] = e, ("error", _picklable(e))
        dist.broadcast_object_list(holder, src=0, group=self.control)
        status, value = holder[0]
        if status == "error":
            raise failure or value  # rank 0 keeps its own traceback
        return value

    def shutdown(self) -> None:
        self.host.shutdown()


def _picklable(error: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


def without_gpu() -> bool:
    """Whether torchrun started this process where there is no GPU: its pool runs on CPU."""
    return not torch.cuda.is_available()


def process_where() -> str:
    """This process, as a worker failure names it."""
    return f"{socket.gethostname()} pid {os.getpid()}"
