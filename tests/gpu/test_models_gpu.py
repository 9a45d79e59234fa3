"""GPU (nvidia-h200-x2, bf16): the layout equalities of tests/megarl/models/test_layouts.py on a model of
Qwen2.5-0.5B's shape with random weights, on megatron-core's local layers and on Transformer Engine's (where it is
installed). bf16 errors are judged against HF transformers' own bf16 error, measured in the same run against the same
fp32 reference.

Rows for benchmarks/results/ go to $MEGARL_RESULTS_DIR/models_gpu-<layers>.json when it is set."""

import datetime
import json
import os

import pytest
import torch

from megarl.models.accelerators import layers_name
from megarl.models.shapes import write_random_checkpoint
from tests.helpers import DIST_WORKER, LAYOUTS, TRANSFORMER_IMPLS, max_abs, mean_abs, run_layout, run_layouts

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (nvidia-h200-x2)")

SHAPE = "qwen2.5-0.5b"
LENGTH_SCALE = 32  # sequences of 192..448 tokens
TWO_RANK_LAYOUTS = ("tp2", "pp2", "cp2", "dp2")


@pytest.fixture(scope="module", params=TRANSFORMER_IMPLS)
def runs(request, tmp_path_factory):
    """{layout: results} on one layer path: one rank, then every two-rank layout in one launch."""
    impl = request.param
    root = tmp_path_factory.mktemp(f"gpu-{impl}")
    model = write_random_checkpoint(SHAPE, root / "model", dtype=torch.bfloat16)
    extra = ["--bf16", "--length-scale", str(LENGTH_SCALE), "--transformer-impl", impl]
    results = {"single": run_layout(model, root / "single.json", 1, 1, 1, nproc=1, extra=extra, timeout=600)}
    jobs = [(model, root / f"{name}.json", LAYOUTS[name], extra) for name in TWO_RANK_LAYOUTS]
    results.update(zip(TWO_RANK_LAYOUTS, run_layouts(DIST_WORKER, jobs, nproc=2, timeout=1200)))
    _write_rows(impl, results)
    return results


def _write_rows(impl: str, results: dict):
    out_dir = os.environ.get("MEGARL_RESULTS_DIR")
    if not out_dir:
        return
    single = results["single"]
    rows = []
    for name, run in results.items():
        tp, pp, cp = LAYOUTS.get(name, (1, 1, 1))
        dp = 2 if name == "dp2" else 1
        row = {
            "date": datetime.date.today().isoformat(),
            "commit": os.environ.get("MEGARL_COMMIT", "unknown"),
            "machine": os.environ.get("MEGARL_MACHINE", "nvidia-h200-x2"),
            "command": "python -m pytest tests/gpu/test_models_gpu.py",
            "what": "check-model",
            "model_shape": SHAPE, "model_path": layers_name(impl), "core_attention": run["core_attention"],
            "compiled_layers": run["compiled_layers"], "dtype": "bf16", "tp": tp, "pp": pp, "cp": cp, "dp": dp,
            "seq_lengths": run["lengths"],
            "logprob_max_abs_diff": run["hf_max_abs_diff"],
            "logprob_mean_abs_diff": run["hf_mean_abs_diff"],
            "weight_check": "exact" if run["export_exact"] else "mismatch",
            "baseline": {"what": "hf-transformers bf16 vs the same fp32 reference",
                         "logprob_max_abs_diff": run["hf_bf16_max_abs_diff"],
                         "logprob_mean_abs_diff": run["hf_bf16_mean_abs_diff"]},
        }
        if name != "single":
            row.update(
                vs_single_logprob_max_abs_diff=max_abs(run["logprobs"], single["logprobs"]),
                vs_single_logprob_mean_abs_diff=mean_abs(run["logprobs"], single["logprobs"]),
                vs_single_values_max_abs_diff=max_abs(run["values"], single["values"]),
                vs_single_actor_grad_norm_rel_diff=abs(run["actor_grad_norm"] - single["actor_grad_norm"]) / single["actor_grad_norm"],
                vs_single_critic_grad_norm_rel_diff=abs(run["critic_grad_norm"] - single["critic_grad_norm"]) / single["critic_grad_norm"],
            )
        rows.append(row)
    with open(os.path.join(out_dir, f"models_gpu-{impl}.json"), "w") as f:
        json.dump(rows, f, indent=1)


def test_bf16_error_is_that_of_hf_bf16(runs):
    for name, run in runs.items():
        assert run["export_exact"], name
        assert run["hf_mean_abs_diff"] <= 1.5 * run["hf_bf16_mean_abs_diff"], (name, run["hf_mean_abs_diff"], run["hf_bf16_mean_abs_diff"])
        assert run["hf_max_abs_diff"] <= 1.5 * run["hf_bf16_max_abs_diff"], name
        assert run["reference_offloaded_gpu_bytes"] == 0, name
        if "packed_vs_padded" in run:
            # On the local path the packed batch runs other kernels than the padded one (RoPE in the core attention,
            # in float32: megarl/models/rotary.py; on one rank, compiled layers): two computations, each within HF
            # bf16's error, may differ by about twice it. On TE's path both run TE's.
            same_kernels = run["core_attention"] == "TEDotProductAttention"
            bound = (1 if same_kernels else 2) * run["hf_bf16_max_abs_diff"]
            assert run["packed_vs_padded"] <= bound, (name, run["packed_vs_padded"], bound)


def test_layouts_agree_within_bf16_error(runs):
    # Each layout's own error against fp32 is bounded above by HF bf16's. Two bf16 computations that round
    # in different orders (TP reductions, CP chunking) each carry such an error, so they may differ by up to
    # about twice it; pipeline parallelism does not reorder anything and must agree exactly where both run the
    # same kernels (the local path compiles its layers on one rank only: megarl/models/compiled_layer.py).
    single = runs["single"]
    mean_bound, max_bound = 2 * single["hf_bf16_mean_abs_diff"], 2 * single["hf_bf16_max_abs_diff"]
    if runs["pp2"]["compiled_layers"] == single["compiled_layers"]:
        assert runs["pp2"]["logprobs"] == single["logprobs"]
    assert runs["dp2"]["logprobs"] == single["logprobs"]
    for name in TWO_RANK_LAYOUTS:
        run = runs[name]
        assert mean_abs(run["logprobs"], single["logprobs"]) <= mean_bound, name
        assert max_abs(run["logprobs"], single["logprobs"]) <= max_bound, name
        assert mean_abs(run["entropy"], single["entropy"]) <= mean_bound, name
        for key in ("actor_grad_norm", "critic_grad_norm"):
            assert abs(run[key] - single[key]) <= 2e-2 * single[key], (name, key, run[key], single[key])
