"""What runs in each worker process: a `WorkerHost` joins the group's process group and hosts the roles placed
on this process (actor, rollout, reference, critic: several roles share one process and one GPU); `Worker` is
the base of role classes.

The host is the same object under both backends: a Ray actor, or a plain object in each torchrun process.
"""

from __future__ import annotations

import os
import traceback
from typing import Any

import torch
import torch.distributed as dist

from parallel import cpu_compat, memory, profiler, topology
from parallel.batch import Batch
from parallel.controller import Peer, RecoverableError
from parallel.dispatch import Collect, RankLayout, worker_method
from parallel.workspaces import reserve_gemm_workspaces


class Worker:
    """Base of role classes. The host has joined the default process group before a role is built, and closes
    its roles (last placed first) when the group shuts down."""

    def close(self) -> None:
        """Release what the role holds outside this process (e.g. a rollout engine's scheduler processes)."""

    def layout(self) -> RankLayout:
        """This rank's data-parallel place: megatron's mesh once the role has built one, else every rank is
        its own data-parallel rank."""
        from megatron.core import parallel_state as ps

        if not ps.model_parallel_is_initialized():
            return RankLayout(dist.get_rank(), dist.get_world_size(), True)
        leader = (ps.get_tensor_model_parallel_rank() == 0 and ps.get_context_parallel_rank() == 0
                  and ps.is_pipeline_last_stage(ignore_virtual=True))
        return RankLayout(ps.get_data_parallel_rank(), ps.get_data_parallel_world_size(), leader)

    @worker_method(collect=Collect.ALL)
    def memory_peaks(self, windows: memory.Windows) -> dict[str, dict[str, int | None]]:
        """This process's device-wide GPU and host memory peaks in each wall-clock window (parallel/memory.py):
        any role answers for the process that hosts it."""
        return memory.peaks(windows)

    @worker_method(collect=Collect.ALL)
    def start_profile(self, tool: str) -> None:
        """Record this process (every role it hosts) with `tool` (parallel/profiler.py) until `stop_profile`."""
        profiler.start(tool)

    @worker_method(collect=Collect.ALL)
    def stop_profile(self, directory: str) -> str | None:
        """Write this process's recording to `directory`; returns the file (None: nothing recorded here)."""
        return profiler.stop(directory, dist.get_rank())


def to_cpu(value: Any) -> Any:
    """Results leave a worker in host memory: the driver may have no GPU, and another rank's device index
    means nothing here."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, Batch):
        return value.to("cpu")
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(v) for v in value)
    return value


class WorkerHost:
    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size
        self.roles: dict[str, Worker] = {}

    def placement(self) -> dict:
        """Where this process runs: node address, a free port there, the GPUs Ray assigned to it."""
        import ray

        return {
            "node_ip": ray.util.get_node_ip_address(),
            "free_port": topology.free_port(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "pid": os.getpid(),
        }

    def join(self, env: dict[str, str], timeout_s: float, rendezvous: topology.Rendezvous | None,
             on_cpu: bool) -> None:
        """Join the group's default process group; `env` holds torchrun's variables for this rank (`rendezvous`:
        the group's own, where they describe a torchrun job of several pools). `on_cpu`: the launcher placed the
        pool on CPU, where megatron runs through parallel/cpu_compat.py."""
        os.environ.update(env)
        if on_cpu:
            cpu_compat.enable()
        topology.init_distributed(timeout_s, rendezvous)
        reserve_gemm_workspaces()  # first: segments of their own (parallel/workspaces.py)
        memory.start()  # after the CUDA device is set, which it samples

    def add_role(self, name: str, cls: type, args: tuple, kwargs: dict) -> None:
        """Build role `name`; a `Peer` argument becomes that role's object in this process."""
        if not (isinstance(cls, type) and issubclass(cls, Worker)):
            raise TypeError(f"{cls!r} is not a subclass of parallel.worker.Worker")
        if name in self.roles:
            raise ValueError(f"a role named {name!r} already runs in this process")
        args = tuple(self._resolved(value) for value in args)
        kwargs = {key: self._resolved(value) for key, value in kwargs.items()}
        self.roles[name] = cls(*args, **kwargs)

    def _resolved(self, value: Any) -> Any:
        return self.roles[value.role] if isinstance(value, Peer) else value

    def layout(self, name: str) -> RankLayout:
        return self.roles[name].layout()

    def call(self, name: str, method: str, args: tuple, kwargs: dict) -> Any:
        with torch.profiler.record_function(f"{name}.{method}"):  # a named range in a profiled step's trace
            result = getattr(self.roles[name], method)(*args, **kwargs)
        memory.sample_now()  # what the call holds at its end, inside the driver's window of it
        return to_cpu(result)

    def run(self, what: str, keep: bool, *args) -> tuple[str, Any]:
        """The one entry point of both backends: host method `what`, returning ("ok", result) or ("error",
        traceback). Failures come back as data so that both backends report them the same way; a result
        the driver does not need (`keep` false) is not sent back; a RecoverableError comes back as ("recoverable",
        traceback)."""
        try:
            result = getattr(self, what)(*args)
        except RecoverableError:
            return "recoverable", traceback.format_exc()
        except Exception:
            return "error", traceback.format_exc()
        return "ok", result if keep else None

    def shutdown(self) -> None:
        for role in reversed(list(self.roles.values())):
            role.close()
        self.roles.clear()
        topology.destroy()
        memory.stop()
