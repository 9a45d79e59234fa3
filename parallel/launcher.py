"""Which backend runs the workers (`trainer.launcher`: Ray or torchrun) and the start of a `Cluster` on it
(parallel/controller.py); each backend is imported only when it starts, so that a driver under torchrun never
loads Ray."""

from __future__ import annotations

import os
import sys
from typing import Sequence

from parallel.controller import Cluster, PoolSpec, WorkerGroup

LAUNCHERS = ("auto", "ray", "torchrun")


def stop_runtime() -> None:
    """End this process's connection to Ray (and a local Ray it started) now rather than at exit, so that nothing
    Ray prints late comes after the run's last line."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ


def resolve_launcher(launcher: str) -> str:
    if launcher not in LAUNCHERS:
        raise ValueError(f"unknown launcher {launcher!r}: use one of {LAUNCHERS}")
    if launcher == "auto":
        return "torchrun" if under_torchrun() else "ray"
    return launcher


def start_cluster(pools: Sequence[PoolSpec], launcher: str = "auto", timeout_s: float = 600.0) -> Cluster:
    """Start one worker group per pool. Under torchrun the job's processes are the pools' GPUs, the first pool's
    first; with more than one pool, the others serve the first's driver code (parallel/served_backend.py), and on
    their processes this call returns only by ending the process when the run ends."""
    launcher = resolve_launcher(launcher)
    if launcher == "torchrun":
        from parallel.spmd_backend import SpmdWorkerGroup

        if len(pools) > 1:
            from parallel.served_backend import start_served_cluster

            return start_served_cluster(pools, timeout_s)
        group = SpmdWorkerGroup(pools[0], timeout_s)
        return Cluster({pools[0].name: group}, launcher, is_driver=group.rank == 0)
    try:
        from parallel.ray_backend import RayWorkerGroup
    except ImportError as e:
        raise RuntimeError(
            f"the Ray launcher needs Ray ({e}): `pip install ray`, or launch with torchrun (launch/torchrun.sh)"
        ) from e
    groups: dict[str, WorkerGroup] = {}
    try:
        for pool in pools:
            groups[pool.name] = RayWorkerGroup(pool, timeout_s)
    except BaseException:
        Cluster(groups, launcher).shutdown()
        raise
    return Cluster(groups, launcher)
