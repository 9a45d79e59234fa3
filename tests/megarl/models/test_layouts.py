"""Every parallel layout computes what one rank computes: log-probs, entropy, values, gradient norms and
the weights after an optimizer step (CPU, gloo, 2 processes, fp32), and matches HF transformers."""

import pytest

from tests.helpers import DIST_WORKER, LAYOUTS, make_model, max_abs, run_layouts

FAMILY_LAYOUTS = {"qwen2": ["tp2", "pp2", "cp2", "dp2"], "qwen3": ["tp2", "pp2", "cp2"], "llama": ["tp2", "pp2"]}


@pytest.fixture(scope="module")
def every_run(tmp_path_factory):
    """family: {layout: results}. Every family's single-rank runs in one launch, and all their 2-rank layouts in
    another: a launch per layout would add a process start-up each."""
    root = tmp_path_factory.mktemp("layouts")
    models = {family: make_model(family, root / family / "model") for family in FAMILY_LAYOUTS}
    singles = [(models[family], root / family / "single.json", (1, 1, 1), []) for family in FAMILY_LAYOUTS]
    layouts = [(models[family], root / family / f"{name}.json", LAYOUTS[name], [])
               for family, names in FAMILY_LAYOUTS.items() for name in names]
    runs = {family: {} for family in FAMILY_LAYOUTS}
    for family, result in zip(FAMILY_LAYOUTS, run_layouts(DIST_WORKER, singles, nproc=1)):
        runs[family]["single"] = result
    named = [(family, name) for family, names in FAMILY_LAYOUTS.items() for name in names]
    for (family, name), result in zip(named, run_layouts(DIST_WORKER, layouts, nproc=2, timeout=600)):
        runs[family][name] = result
    return runs


@pytest.fixture(params=sorted(FAMILY_LAYOUTS))
def family_runs(request, every_run):
    return request.param, every_run[request.param]


def test_matches_hf_and_round_trips(family_runs):
    _, runs = family_runs
    for name, run in runs.items():
        assert run["hf_max_abs_diff"] <= 1e-5, name
        assert run["export_exact"], name
        assert run["reference_max_abs_diff"] <= 1e-6, name
        if "packed_vs_padded" in run:
            assert run["packed_vs_padded"] <= 1e-5, name


def test_layouts_equal_the_single_rank_run(family_runs):
    family, runs = family_runs
    single = runs["single"]
    for name in FAMILY_LAYOUTS[family]:
        run = runs[name]
        for key in ("logprobs", "entropy", "values", "logprobs_after"):
            assert max_abs(run[key], single[key]) <= 1e-5, (name, key)
        for key in ("actor_grad_norm", "critic_grad_norm"):
            assert abs(run[key] - single[key]) <= 1e-5 * abs(single[key]), (name, key, run[key], single[key])
    assert abs(single["recompute_grad_norm"] - single["actor_grad_norm"]) <= 1e-6 * single["actor_grad_norm"]
    # The step changed the policy: equality above is not the trivial one.
    assert max_abs(single["logprobs_after"], single["logprobs"]) > 1e-3
