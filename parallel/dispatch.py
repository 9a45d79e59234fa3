"""How a worker method's arguments go out to the ranks of a worker group and how their results come back.

A role class declares it per method with `@worker_method(dispatch, collect)`; the controller applies it the
same way whichever backend (Ray or torchrun) runs the workers:

- `Dispatch.ONE_TO_ALL`: every rank gets the same arguments.
- `Dispatch.DP_SPLIT`: every `Batch` argument is split into data-parallel-size equal parts and each rank
  gets its data-parallel rank's part (ranks of one model-parallel group get the same part).
- `Collect.ALL`: the list of every rank's result, in rank order.
- `Collect.RANK_ZERO`: rank 0's result.
- `Collect.DP_LEADERS`: one result per data-parallel rank, from the rank that holds the group's complete
  output (`RankLayout.is_leader`), in data-parallel order; `Batch` results are concatenated.
- `Collect.AGREED`: the one value every data-parallel rank returns (an update's metrics, reduced over the ranks):
  the leaders' results, checked equal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Sequence, TypeVar

from parallel.batch import Batch


class Dispatch(Enum):
    ONE_TO_ALL = "one_to_all"
    DP_SPLIT = "dp_split"


class Collect(Enum):
    ALL = "all"
    RANK_ZERO = "rank_zero"
    DP_LEADERS = "dp_leaders"
    AGREED = "agreed"


@dataclass(frozen=True)
class MethodSpec:
    dispatch: Dispatch
    collect: Collect


@dataclass(frozen=True)
class RankLayout:
    """One rank's place in a role's data-parallel layout."""

    dp_rank: int
    dp_size: int
    is_leader: bool  # holds its data-parallel group's complete result


_SPEC_ATTR = "__megarl_worker_method__"
F = TypeVar("F", bound=Callable[..., Any])


def worker_method(dispatch: Dispatch = Dispatch.ONE_TO_ALL, collect: Collect = Collect.ALL) -> Callable[[F], F]:
    """Mark a role method as callable from the driver, with its dispatch and collect modes."""

    def mark(fn: F) -> F:
        setattr(fn, _SPEC_ATTR, MethodSpec(dispatch, collect))
        return fn

    return mark


def method_spec(cls: type, name: str) -> MethodSpec:
    spec = getattr(getattr(cls, name, None), _SPEC_ATTR, None)
    if spec is None:
        callable_names = sorted(n for n in dir(cls) if getattr(getattr(cls, n, None), _SPEC_ATTR, None))
        raise AttributeError(
            f"{cls.__name__}.{name} is not a worker method (decorate it with @worker_method); "
            f"worker methods: {callable_names}"
        )
    return spec


def check_layouts(layouts: Sequence[RankLayout]) -> None:
    """Every data-parallel rank has exactly one leader and all ranks agree on the data-parallel size."""
    sizes = {layout.dp_size for layout in layouts}
    if len(sizes) != 1:
        raise ValueError(f"ranks disagree on the data-parallel size: {sorted(sizes)}")
    leaders = sorted(layout.dp_rank for layout in layouts if layout.is_leader)
    if leaders != list(range(sizes.pop())):
        raise ValueError(f"each data-parallel rank needs exactly one leader; leaders at dp ranks {leaders}")


def dispatch_inputs(spec: MethodSpec, layouts: Sequence[RankLayout], args: tuple, kwargs: dict) -> list:
    """Per rank, the (args, kwargs) it is called with. Parts for the same data-parallel rank are the same
    objects, so a backend can send each part once."""
    if spec.dispatch is Dispatch.ONE_TO_ALL:
        return [(args, kwargs)] * len(layouts)
    dp_size = layouts[0].dp_size

    def split(value):
        if not isinstance(value, Batch):
            return [value] * dp_size
        if len(value) % dp_size:
            raise ValueError(
                f"a batch of {len(value)} samples cannot be split over {dp_size} data-parallel ranks: "
                f"its size must be a multiple of {dp_size}"
            )
        return value.chunk(dp_size)

    split_args = [split(a) for a in args]
    split_kwargs = {k: split(v) for k, v in kwargs.items()}
    per_dp_rank = [
        (tuple(parts[d] for parts in split_args), {k: parts[d] for k, parts in split_kwargs.items()})
        for d in range(dp_size)
    ]
    return [per_dp_rank[layout.dp_rank] for layout in layouts]


def wanted_ranks(spec: MethodSpec, layouts: Sequence[RankLayout]) -> list[bool]:
    """Which ranks' results `collect_results` reads (the others need not be sent back)."""
    if spec.collect is Collect.ALL:
        return [True] * len(layouts)
    if spec.collect is Collect.RANK_ZERO:
        return [rank == 0 for rank in range(len(layouts))]
    return [layout.is_leader for layout in layouts]


def collect_results(spec: MethodSpec, layouts: Sequence[RankLayout], results: Sequence[Any]) -> Any:
    if spec.collect is Collect.ALL:
        return list(results)
    if spec.collect is Collect.RANK_ZERO:
        return results[0]
    by_dp_rank = sorted(
        ((layout.dp_rank, result) for layout, result in zip(layouts, results) if layout.is_leader),
        key=lambda pair: pair[0],
    )
    ordered = [result for _, result in by_dp_rank]
    if spec.collect is Collect.AGREED:
        return agreed(ordered)
    if ordered and all(isinstance(r, Batch) for r in ordered):
        return Batch.concat(ordered)
    return ordered


def agreed(values: Sequence[Any]) -> Any:
    """The value that every one of `values` is (NaN equals NaN: a diverged update is the health checks' to report)."""
    for rank, value in enumerate(values[1:], start=1):
        if not _same(value, values[0]):
            raise ValueError(f"data-parallel ranks 0 and {rank} returned different values where they must agree: "
                             f"{values[0]!r} against {value!r}")
    return values[0]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    return a == b
