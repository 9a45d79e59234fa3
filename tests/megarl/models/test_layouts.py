"""Every parallel layout computes what one rank computes: log-probs, entropy, values, gradient norms and
the weights after an optimizer step (CPU, gloo, 2 processes, fp32), and matches HF transformers."""

import pytest

from tests.helpers import LAYOUTS, make_model, max_abs, run_layout

FAMILY_LAYOUTS = {"qwen2": ["tp2", "pp2", "cp2", "dp2"], "qwen3": ["tp2", "pp2", "cp2"], "llama": ["tp2", "pp2"]}


@pytest.fixture(scope="module", params=sorted(FAMILY_LAYOUTS))
def family_runs(request, tmp_path_factory):
    family = request.param
    root = tmp_path_factory.mktemp(family)
    model_dir = make_model(family, root / "model")
    runs = {"single": run_layout(model_dir, root / "single.json", 1, 1, 1, nproc=1)}
    for name in FAMILY_LAYOUTS[family]:
        runs[name] = run_layout(model_dir, root / f"{name}.json", *LAYOUTS[name], nproc=2)
    return family, runs


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
