"""Dispatch and collect semantics on a TP=2 × DP=2 layout (rank = dp * 2 + tp; tp rank 0 leads)."""

import pytest
import torch

from parallel.batch import Batch
from parallel.dispatch import (
    Collect,
    Dispatch,
    RankLayout,
    check_layouts,
    collect_results,
    dispatch_inputs,
    method_spec,
    wanted_ranks,
    worker_method,
)

LAYOUTS = [RankLayout(dp_rank=r // 2, dp_size=2, is_leader=r % 2 == 0) for r in range(4)]


class Role:
    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    def compute(self, batch, scale=1): ...

    @worker_method()
    def everywhere(self): ...

    def plain(self): ...


def test_methods_declare_their_modes():
    spec = method_spec(Role, "compute")
    assert (spec.dispatch, spec.collect) == (Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    assert method_spec(Role, "everywhere").collect is Collect.ALL
    with pytest.raises(AttributeError, match=r"Role.plain is not a worker method.*\['compute', 'everywhere'\]"):
        method_spec(Role, "plain")


def test_dp_split_gives_each_model_parallel_group_its_part():
    batch = Batch({"x": torch.arange(8)})
    inputs = dispatch_inputs(method_spec(Role, "compute"), LAYOUTS, (batch,), {"scale": 3})
    parts = [args[0]["x"].tolist() for args, _ in inputs]
    assert parts == [[0, 1, 2, 3], [0, 1, 2, 3], [4, 5, 6, 7], [4, 5, 6, 7]]
    assert all(kwargs == {"scale": 3} for _, kwargs in inputs)
    assert inputs[0] is inputs[1] and inputs[0] is not inputs[2]  # one object per part: sent once
    with pytest.raises(ValueError, match="7 samples cannot be split over 2 data-parallel ranks"):
        dispatch_inputs(method_spec(Role, "compute"), LAYOUTS, (Batch({"x": torch.arange(7)}),), {})


def test_one_to_all_sends_the_same_arguments():
    inputs = dispatch_inputs(method_spec(Role, "everywhere"), LAYOUTS, (1, "a"), {"k": 2})
    assert inputs == [((1, "a"), {"k": 2})] * 4


def test_collect_from_dp_leaders_in_dp_order():
    spec = method_spec(Role, "compute")
    assert wanted_ranks(spec, LAYOUTS) == [True, False, True, False]
    results = [Batch({"y": torch.tensor([r, r])}) if r % 2 == 0 else None for r in range(4)]
    shuffled = [LAYOUTS[2], LAYOUTS[1], LAYOUTS[0], LAYOUTS[3]]
    merged = collect_results(spec, shuffled, [results[2], None, results[0], None])
    assert merged["y"].tolist() == [0, 0, 2, 2]
    assert collect_results(spec, LAYOUTS, [{"m": 0}, None, {"m": 1}, None]) == [{"m": 0}, {"m": 1}]


def test_collect_all_and_rank_zero():
    assert collect_results(method_spec(Role, "everywhere"), LAYOUTS, [0, 1, 2, 3]) == [0, 1, 2, 3]
    class Zero:
        @worker_method(collect=Collect.RANK_ZERO)
        def f(self): ...
    spec = method_spec(Zero, "f")
    assert wanted_ranks(spec, LAYOUTS) == [True, False, False, False]
    assert collect_results(spec, LAYOUTS, ["r0", None, None, None]) == "r0"


def test_layouts_need_one_leader_per_dp_rank():
    check_layouts(LAYOUTS)
    with pytest.raises(ValueError, match="exactly one leader"):
        check_layouts([RankLayout(0, 2, True), RankLayout(0, 2, True), RankLayout(1, 2, False)])
    with pytest.raises(ValueError, match="disagree"):
        check_layouts([RankLayout(0, 1, True), RankLayout(0, 2, True)])


def test_agreed_results_come_back_once_and_must_agree():
    class Update:
        @worker_method(Dispatch.DP_SPLIT, Collect.AGREED)
        def step(self, batch): ...
    spec = method_spec(Update, "step")
    assert wanted_ranks(spec, LAYOUTS) == [True, False, True, False]  # the leaders hold the reduced result
    nan = float("nan")
    assert collect_results(spec, LAYOUTS, [{"loss": 1.5}, None, {"loss": 1.5}, None]) == {"loss": 1.5}
    assert collect_results(spec, LAYOUTS, [{"loss": nan}, None, {"loss": nan}, None]).keys() == {"loss"}
    with pytest.raises(ValueError, match="data-parallel ranks 0 and 1 returned different values"):
        collect_results(spec, LAYOUTS, [{"loss": 1.5}, None, {"loss": 2.5}, None])
