"""The Ray backend: one Ray actor (a `WorkerHost`) per GPU, placed by one STRICT_PACK placement group per node
of the pool (one bundle per GPU), driven from a single controller process.

Worker processes see all of their node's GPUs and select the one Ray assigned to them, so that a rollout engine
started by a group's first rank can use its neighbours' GPUs by index (SGLang's `base_gpu_id`), as under
torchrun. For that Ray must not narrow CUDA_VISIBLE_DEVICES to the assigned GPU: RAY_EXPERIMENTAL_NOSET_CUDA_
VISIBLE_DEVICES=1 in the workers' environment, which a local cluster started here inherits, and which
launch/runtime_env.yaml and launch/slurm/ray_cluster.sbatch set for clusters. The variable has to be there when
a worker process starts: CUDA reads the visible devices once, and imports already query it.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any, Sequence

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from parallel.controller import Pending, PoolSpec, WorkerError, WorkerGroup
from parallel.worker import WorkerHost

PLACEMENT_TIMEOUT_S = float(os.environ.get("MEGARL_PLACEMENT_TIMEOUT_S", "300"))
GRACEFUL_SHUTDOWN_S = 60.0
PROCESS_DIED = "the worker process died"
ROOT_CAUSE_WAIT_S = 3.0  # after a rank's error, how long a peer's process death may take to reach the driver


KEEP_VISIBLE_DEVICES = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"


def ensure_ray() -> None:
    """Connect to the cluster in RAY_ADDRESS (set by `ray job submit`) or one started on this node by `ray start`;
    otherwise start a local one, whose workers inherit this environment."""
    if not ray.is_initialized():
        os.environ.setdefault(KEEP_VISIBLE_DEVICES, "1")
        ray.init(log_to_driver=True)
        keep_python_sigterm_handler()


def keep_python_sigterm_handler() -> None:
    """Ray's native core puts its failure-signal handler over the Python one for SIGTERM as the driver connects: a
    stop (`kill`, SLURM) then first printed a crash-like stack dump, and once, under a full test suite's load, the
    driver ended by SIGABRT right after it instead of stopping. Re-armed here, the Python handler (Ray's or the
    recipe command's) takes SIGTERM directly again."""
    handler = signal.getsignal(signal.SIGTERM)  # None: not set from Python, nothing to re-arm
    if handler is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)


def rank_envs(infos: list[dict], use_gpu: bool) -> list[dict[str, str]]:
    """torchrun's variables for each rank from where Ray placed it (`WorkerHost.placement`): RANK, MASTER_ADDR/PORT
    at rank 0, and LOCAL_RANK: with GPUs, the index of the rank's assigned GPU among those the process sees."""
    per_node: dict[str, int] = {}
    for info in infos:
        per_node[info["node_ip"]] = per_node.get(info["node_ip"], 0) + 1
    envs: list[dict[str, str]] = []
    seen: dict[str, int] = {}
    for rank, info in enumerate(infos):
        node = info["node_ip"]
        local_rank = seen.get(node, 0)
        seen[node] = local_rank + 1
        if use_gpu:
            gpu, visible = info["gpu_ids"][0], info["visible_devices"]
            local_rank = visible.split(",").index(gpu) if visible else int(gpu)
        envs.append({
            "RANK": str(rank), "WORLD_SIZE": str(len(infos)), "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(per_node[node]),
            "MASTER_ADDR": infos[0]["node_ip"], "MASTER_PORT": str(infos[0]["free_port"]),
        })
    return envs


class RayWorkerGroup(WorkerGroup):
    def __init__(self, pool: PoolSpec, timeout_s: float):
        ensure_ray()
        self.pool = pool
        self.use_gpu = ray.cluster_resources().get("GPU", 0) > 0
        self.placement_groups = self._reserve()
        self.actors = self._start_hosts()
        self.where = [f"rank {rank} of pool {pool.name!r}" for rank in range(pool.world_size)]
        infos = self.run("placement", [()] * pool.world_size, [True] * pool.world_size, ("host", "placement"))
        self.where = [f"node {info['node_ip']} pid {info['pid']}" for info in infos]
        envs = rank_envs(infos, self.use_gpu)
        self.run("join", [(env, timeout_s, None, not self.use_gpu) for env in envs], [False] * len(envs),
                 ("host", "join"))

    def _reserve(self) -> list:
        bundle = {"GPU": 1, "CPU": 1} if self.use_gpu else {"CPU": 1}
        groups = [placement_group([bundle] * n, strategy="STRICT_PACK", name=f"megarl_{self.pool.name}_{node}")
                  for node, n in enumerate(self.pool.gpus_per_node)]
        try:
            ray.get([g.ready() for g in groups], timeout=PLACEMENT_TIMEOUT_S)
        except GetTimeoutError:
            for g in groups:
                remove_placement_group(g)
            kind = "GPU" if self.use_gpu else "CPU"
            raise RuntimeError(
                f"Ray could not place pool {self.pool.name!r} ({list(self.pool.gpus_per_node)} {kind}s per node) "
                f"within {PLACEMENT_TIMEOUT_S:.0f} s; the cluster has {ray.cluster_resources()}. Lower "
                "trainer.nnodes / trainer.n_gpus_per_node or add nodes (MEGARL_PLACEMENT_TIMEOUT_S sets the wait)"
            ) from None
        return groups

    def _start_hosts(self) -> list:
        host = ray.remote(WorkerHost)
        actors: list = []
        for group, n in zip(self.placement_groups, self.pool.gpus_per_node):
            for bundle in range(n):
                options = {
                    "num_cpus": 1,
                    "num_gpus": 1 if self.use_gpu else 0,
                    "scheduling_strategy": PlacementGroupSchedulingStrategy(group, bundle),
                }
                actors.append(host.options(**options).remote(len(actors), self.pool.world_size))
        return actors

    def run(self, what: str, per_rank: Sequence[tuple], wanted: Sequence[bool], label: tuple[str, str]) -> list:
        return self.submit(what, per_rank, wanted, label).result()

    def submit(self, what: str, per_rank: Sequence[tuple], wanted: Sequence[bool], label: tuple[str, str]) -> Pending:
        """Each rank's Ray actor runs its calls in the order they came: a later call waits for this one there."""
        shared: dict[int, Any] = {}

        def sent_once(value):
            # A data-parallel part goes to every rank of its model-parallel group: put it in the object store once.
            if isinstance(value, (str, int, float, bool, type(None))):
                return value
            if id(value) not in shared:
                shared[id(value)] = ray.put(value)
            return shared[id(value)]

        pending = {
            actor.run.remote(what, keep, *(sent_once(a) for a in args)): rank
            for rank, (actor, args, keep) in enumerate(zip(self.actors, per_rank, wanted))
        }
        return Pending(lambda: self._collect(pending, label))

    def _collect(self, pending: dict, label: tuple[str, str]) -> list:
        results: list = [None] * len(self.actors)
        recoverable: tuple[int, tuple] | None = None  # the first, raised once every rank has answered
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            rank = pending.pop(done[0])
            try:
                outcome = ray.get(done[0])
            except RayActorError as e:
                outcome = ("error", f"{PROCESS_DIED}: {e}")
            except RayError as e:
                outcome = ("error", str(e))
            if outcome[0] == "recoverable":
                recoverable = recoverable or (rank, outcome)
                continue
            if outcome[0] == "error":
                rank, outcome = _root_cause(pending, rank, outcome)
                # The other ranks may wait in a collective for the failed one: stop them all now.
                self.shutdown(graceful=False)
                raise WorkerError(label[0], label[1], rank, self.where[rank], outcome[1])
            results[rank] = outcome[1]
        if recoverable is not None:
            rank, outcome = recoverable
            raise WorkerError(label[0], label[1], rank, self.where[rank], outcome[1])
        return results

    def shutdown(self, graceful: bool = True) -> None:
        """Close the roles (a rollout engine stops its scheduler processes), then end the worker processes.
        After a failure (`graceful=False`) ranks may be stuck in a collective: they are ended at once."""
        actors = getattr(self, "actors", [])
        if graceful and actors:
            try:
                ray.get([actor.run.remote("shutdown", False) for actor in actors], timeout=GRACEFUL_SHUTDOWN_S)
            except (GetTimeoutError, RayError):
                pass  # ended below either way
        for actor in actors:
            ray.kill(actor, no_restart=True)
        for group in getattr(self, "placement_groups", []):
            remove_placement_group(group)
        self.actors, self.placement_groups = [], []


def _root_cause(pending: dict, rank: int, outcome: tuple) -> tuple[int, tuple]:
    """The failure to report: a rank whose process died is the cause that a peer's broken collective follows from,
    and Ray may learn of the death after the peer's error arrives, so wait briefly for one."""
    if outcome[1].startswith(PROCESS_DIED):
        return rank, outcome
    done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=ROOT_CAUSE_WAIT_S)
    for ref in done:
        try:
            ray.get(ref)
        except RayActorError as e:
            return pending[ref], ("error", f"{PROCESS_DIED}: {e}")
        except RayError:
            continue
    return rank, outcome
