"""The driver's view of the workers, the same under Ray and under torchrun.

A `Cluster` holds one `WorkerGroup` per resource pool (a set of GPUs: one process per GPU). `group.spawn(
"actor", ActorWorker, ...)` places a role on every process of the group and returns a `RoleHandle[ActorWorker]`;
`handle.call(ActorWorker.update_actor, batch)` dispatches the arguments, runs the worker method on every rank and
collects the results as the method declares (parallel/dispatch.py). The driver calls roles through explicit methods
built on `call` (megarl/trainer/groups.py), so the RL loop cannot tell the backends apart:

`parallel/launcher.py` starts the cluster on one of two backends:

- Ray (`parallel/ray_backend.py`): a single driver process; worker processes are Ray actors placed by
  placement groups.
- torchrun (`parallel/spmd_backend.py`): every torchrun process runs the driver code and hosts its rank's
  roles in-process; results are exchanged over a gloo group so that every rank's driver sees the same values.
  With several pools, only the first pool's processes do; the others serve their calls
  (`parallel/served_backend.py`).

A call to another pool may be in flight while the driver goes on (`handle.submit`). Where two pools' calls meet in a
collective of their own (the weight bridge), the driver submits the call to the pool that serves it first: under
torchrun a call to the driver's own pool runs at once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Concatenate, Generic, ParamSpec, Sequence, TypeVar

from parallel.dispatch import RankLayout, check_layouts, collect_results, dispatch_inputs, method_spec, wanted_ranks

T = TypeVar("T")
W = TypeVar("W")  # a worker class (parallel/worker.py), which the driver reaches only through its handle
P = ParamSpec("P")


class RecoverableError(RuntimeError):
    """A worker failure that leaves every rank able to go on: raised outside any collective, with the process
    group intact (e.g. a rollout engine whose scheduler died). The backends let the other ranks finish the call and
    keep the workers, so the driver may recover; any other failure stops them."""


class WorkerError(RuntimeError):
    """A worker method raised (or its process died); carries the role, rank and the remote traceback."""

    def __init__(self, role: str, method: str, rank: int, where: str, remote_traceback: str):
        self.role, self.method, self.rank, self.where, self.remote_traceback = role, method, rank, where, remote_traceback
        super().__init__(f"{role}.{method} failed on rank {rank} ({where}):\n{remote_traceback.rstrip()}")

    @property
    def cause(self) -> str:
        """The remote exception's last line, e.g. 'megarl.rollout.base.EngineDied: ...'."""
        lines = self.remote_traceback.strip().splitlines()
        return lines[-1] if lines else ""

    def raised(self, exception: type[BaseException]) -> bool:
        """Whether the worker raised `exception` (by its qualified name: the class itself stays remote)."""
        name = exception.__qualname__ if exception.__module__ == "builtins" else \
            f"{exception.__module__}.{exception.__qualname__}"
        return self.cause == name or self.cause.startswith(f"{name}:")


@dataclass(frozen=True)
class PoolSpec:
    """GPUs per node, one entry per node."""

    name: str
    gpus_per_node: tuple[int, ...]

    @property
    def world_size(self) -> int:
        return sum(self.gpus_per_node)


class WorkerGroup(ABC):
    """The processes of one pool; subclasses say how a call reaches them."""

    pool: PoolSpec

    @property
    def world_size(self) -> int:
        return self.pool.world_size

    @abstractmethod
    def run(self, what: str, per_rank: Sequence[tuple], wanted: Sequence[bool], label: tuple[str, str]) -> list:
        """Call host method `what` on every rank r with `*per_rank[r]`; return the results of the wanted ranks
        (None for the others) or raise `WorkerError` for the first rank that failed (label = role, method)."""

    def submit(self, what: str, per_rank: Sequence[tuple], wanted: Sequence[bool], label: tuple[str, str]) -> Pending:
        """`run` without waiting for it: the call runs while the driver goes on (on another pool's GPUs) until
        `.result()`. Backends whose processes run the driver code themselves (torchrun) run it at once."""
        result = self.run(what, per_rank, wanted, label)
        return Pending(lambda: result)

    @abstractmethod
    def shutdown(self) -> None: ...

    def from_driver(self, fn: Callable[[], Any]) -> Any:
        """`fn()`, computed once and returned to every process that runs the driver code (there is one under Ray)."""
        return fn()

    def spawn(self, role: str, cls: type[W], *args: Any, **kwargs: Any) -> RoleHandle[W]:
        """Build `cls(*args, **kwargs)` on every process of the group under the name `role`. An argument that is the
        handle of a role on this group reaches each process as that role's object there: its peer (the actor whose
        weights a colocated rollout engine streams), passed explicitly rather than looked up."""
        args = tuple(self._peer(role, value) for value in args)
        kwargs = {key: self._peer(role, value) for key, value in kwargs.items()}
        self.run("add_role", [(role, cls, args, kwargs)] * self.world_size, [False] * self.world_size,
                 (role, "__init__"))
        layouts = self.run("layout", [(role,)] * self.world_size, [True] * self.world_size, (role, "layout"))
        check_layouts(layouts)
        return RoleHandle(self, role, cls, layouts)

    def _peer(self, role: str, value: Any) -> Any:
        if not isinstance(value, RoleHandle):
            return value
        if value.group is not self:
            raise ValueError(f"the {role} is given the {value.role} as a peer, but they run on different pools "
                             f"({self.pool.name!r}, {value.group.pool.name!r}): a peer shares the role's processes")
        return Peer(value.role)


@dataclass(frozen=True)
class Peer:
    """How a `RoleHandle` argument of `spawn` travels: the name of a role on the same processes."""

    role: str


class Pending(Generic[T]):
    """A call in flight; `result()` waits for it once and returns (or raises) what the call itself would."""

    def __init__(self, wait: Callable[[], T]):
        self._wait, self._done = wait, False
        self._value: T | None = None

    def result(self) -> T:
        if not self._done:
            self._value, self._done = self._wait(), True
        return self._value  # type: ignore[return-value]  # set by the first call


class RoleHandle(Generic[W]):
    """A role placed on a worker group, generic in its worker class: `call(Worker.method, ...)` runs the worker
    method on every rank (its arguments checked against the method's signature) and returns what the method's collect
    mode makes of the ranks' results; `submit` is the same call in flight."""

    def __init__(self, group: WorkerGroup, role: str, cls: type[W], layouts: list[RankLayout]):
        self.group, self.role, self.cls, self.layouts = group, role, cls, layouts

    @property
    def dp_size(self) -> int:
        return self.layouts[0].dp_size

    def call(self, method: Callable[Concatenate[W, P], Any], *args: P.args, **kwargs: P.kwargs) -> Any:
        return self.submit(method, *args, **kwargs).result()

    def submit(self, method: Callable[Concatenate[W, P], Any], *args: P.args, **kwargs: P.kwargs) -> Pending[Any]:
        name = method.__name__
        spec = method_spec(self.cls, name)
        inputs = dispatch_inputs(spec, self.layouts, args, kwargs)
        per_rank = [(self.role, name, a, k) for a, k in inputs]
        pending = self.group.submit("call", per_rank, wanted_ranks(spec, self.layouts), (self.role, name))
        return Pending(lambda: collect_results(spec, self.layouts, pending.result()))


def raise_if_failed(outcome: tuple[str, Any], label: tuple[str, str], rank: int, where: str) -> Any:
    """The value of a host's ("ok", value), or `WorkerError` for ("error" or "recoverable", traceback)."""
    status, value = outcome
    if status != "ok":
        raise WorkerError(label[0], label[1], rank, where, value)
    return value


class Cluster:
    def __init__(self, groups: dict[str, WorkerGroup], launcher: str, is_driver: bool = True):
        """`is_driver`: whether this process writes the run's outputs (the Ray driver; rank 0 under torchrun)."""
        self.groups, self.launcher, self.is_driver = groups, launcher, is_driver

    def __getitem__(self, pool: str) -> WorkerGroup:
        return self.groups[pool]

    def shutdown(self) -> None:
        for group in self.groups.values():
            group.shutdown()

    def once(self, fn: Callable, *args, **kwargs) -> Any:
        """`fn(*args, **kwargs)` computed by one process and returned to every process that runs the driver code.
        Under torchrun each rank runs that code: a result that may differ between calls (a reward function's
        timeout, anything random or timed) must be computed once and shared, or the ranks would part ways."""
        return next(iter(self.groups.values())).from_driver(lambda: fn(*args, **kwargs))

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
