"""torchrun with several resource pools: the first pool's processes run the driver code (parallel/spmd_backend.py)
and every other pool's processes serve it, as Ray's workers would.

Each process joins its own pool's default process group, on torchrun's store under the pool's prefix, so each pool
is a world of its own as under Ray (megatron's mesh and NCCL groups stay within it). A gloo group over the whole job,
outside every pool's world (the link), carries the calls: the driver's rank 0 sends each rank of a served pool its
part of a call and waits for the outcomes in a thread of its own, so a call runs there while the driver goes on
(`submit`); `.result()` shares the outcomes with the driver's other ranks. A served rank runs its calls in the order
they come, until the driver stops it at the end of the run; then its process exits.

The link's waits span whole phases of a step (a served rank waits for its next call while the trainer updates), so
its timeout is long; a process that dies closes its connections, which ends the wait on the other side at once.
"""

from __future__ import annotations

import datetime
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Sequence

import torch
import torch.distributed as dist

from parallel.controller import Cluster, Pending, PoolSpec, WorkerGroup, raise_if_failed
from parallel.objects import object_tensor, tensor_object
from parallel.spmd_backend import SpmdWorkerGroup, process_where, without_gpu
from parallel.topology import Rendezvous
from parallel.worker import WorkerHost

LINK_TIMEOUT = datetime.timedelta(days=7)
STOP = None  # the message that ends a served rank's loop


class Link:
    """Python objects between two processes of the job, over a gloo group of all of them."""

    def __init__(self, store: dist.Store, rank: int, size: int):
        self.group = dist.ProcessGroupGloo(dist.PrefixStore("megarl/link", store), rank, size, LINK_TIMEOUT)

    def send(self, value: Any, dst: int) -> None:
        payload = object_tensor(value)
        self.group.send([torch.tensor([payload.numel()], dtype=torch.int64)], dst, 0).wait()
        self.group.send([payload], dst, 0).wait()

    def receive(self, src: int) -> Any:
        length = torch.empty(1, dtype=torch.int64)
        self.group.recv([length], src, 0).wait()
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
        self.group.recv([payload], src, 0).wait()
        return tensor_object(payload)


class ServedWorkerGroup(WorkerGroup):
    """The driver's handle on a served pool whose ranks are the job's ranks `first` … `first + world_size - 1`."""

    def __init__(self, pool: PoolSpec, link: Link, first: int, driver: SpmdWorkerGroup):
        self.pool, self.link, self.first, self.driver = pool, link, first, driver
        # The driver's rank 0 alone talks to the pool, one call after the other, as the pool runs them.
        self.calls = ThreadPoolExecutor(1, thread_name_prefix=f"{pool.name}-calls") if driver.rank == 0 else None

    def run(self, what: str, per_rank: Sequence[tuple], wanted: Sequence[bool], label: tuple[str, str]) -> list:
        return self.submit(what, per_rank, wanted, label).result()

    def submit(self, what: str, per_rank: Sequence[tuple], wanted: Sequence[bool], label: tuple[str, str]) -> Pending:
        exchange = self.calls.submit(self._exchange, what, per_rank, wanted) if self.calls is not None else None

        def outcomes() -> list:  # from_driver computes on rank 0, the one holding the exchange, and shares it
            gathered = self.driver.from_driver(lambda: exchange.result())  # type: ignore[union-attr]  # on rank 0
            return [raise_if_failed(outcome, label, rank, where) for rank, (outcome, where) in enumerate(gathered)]

        return Pending(outcomes)

    def _exchange(self, what: str, per_rank: Sequence[tuple], wanted: Sequence[bool]) -> list:
        """Each rank's (outcome, where); a rank whose process ended (its connection closed) fails the call."""
        try:
            for rank, args in enumerate(per_rank):
                self.link.send((what, wanted[rank], args), self.first + rank)
            return [self.link.receive(self.first + rank) for rank in range(self.world_size)]
        except RuntimeError as e:
            lost = ("error", f"RuntimeError: the link to the {self.pool.name} pool failed ({e}): one of its processes "
                             "ended; its own output has the cause")
            return [(lost, f"{self.pool.name} pool")] * self.world_size

    def shutdown(self) -> None:
        if self.calls is not None:
            stopped: Future = self.calls.submit(self._stop)
            self.calls.shutdown()
            stopped.result()

    def _stop(self) -> None:
        for rank in range(self.world_size):
            try:
                self.link.send(STOP, self.first + rank)
            except RuntimeError:  # its process ended already (the run is failing): nothing to stop
                pass


def start_served_cluster(pools: Sequence[PoolSpec], timeout_s: float) -> Cluster:
    """This process's part of a torchrun job of `pools` (the first runs the driver): the driver's cluster, or, on a
    served pool's process, its calls until the run ends and then the process's exit (SystemExit 0)."""
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    sizes = [pool.world_size for pool in pools]
    if world != sum(sizes):
        raise ValueError(f"torchrun started {world} processes but the pools have {sum(sizes)} GPUs ("
                         + ", ".join(f"{p.name} {p.world_size}" for p in pools) + "): make them equal")
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        raise RuntimeError("several resource pools under torchrun need torchrun's shared store "
                           "(unset TORCH_DISABLE_SHARE_RDZV_TCP_STORE), or launch with Ray")
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=datetime.timedelta(seconds=timeout_s))
    link = Link(store, rank, world)
    firsts = [sum(sizes[:i]) for i in range(len(pools))]
    mine = max(i for i, first in enumerate(firsts) if first <= rank)
    rendezvous = Rendezvous(dist.PrefixStore(f"megarl/pool/{pools[mine].name}", store), rank - firsts[mine],
                            sizes[mine])
    if mine == 0:
        driver = SpmdWorkerGroup(pools[0], timeout_s, rendezvous)
        groups: dict[str, WorkerGroup] = {pools[0].name: driver}
        for pool, first in zip(pools[1:], firsts[1:]):
            groups[pool.name] = ServedWorkerGroup(pool, link, first, driver)
        return Cluster(groups, "torchrun", is_driver=rank == 0)
    serve(pools[mine], rendezvous, link, timeout_s)
    raise SystemExit(0)


def serve(pool: PoolSpec, rendezvous: Rendezvous, link: Link, timeout_s: float) -> None:
    """A served rank: join the pool's world, then run the driver's calls as they come until it stops the run."""
    host = WorkerHost(rendezvous.rank, pool.world_size)
    where = process_where()
    raise_if_failed(host.run("join", False, {}, timeout_s, rendezvous, without_gpu()), ("host", "join"),
                    rendezvous.rank, where)
    try:
        while (message := link.receive(0)) is not STOP:
            what, keep, args = message
            link.send((host.run(what, keep, *args), where), 0)
    finally:
        host.shutdown()
