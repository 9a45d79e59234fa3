"""GPU (one GPU, bf16): the model path on Transformer Engine's layers (`actor.megatron.transformer_impl:
transformer_engine`) against megatron-core's local layers, in one launch on models of Qwen2.5-0.5B's and Qwen3-0.6B's
shapes (query/key norms) with random weights: both within HF bf16's own error of the fp32 reference, packed sequences
through TE's attention equal to one padded batch, the export exact, the actor's and critic's gradient norms and the
reference's log-probs as the local path's. Transformer Engine on the GPU machine: benchmarks/accel/install_te.sh.

Rows for benchmarks/results/ go to $MEGARL_RESULTS_DIR/transformer_engine_gpu.json when it is set."""

import datetime
import json
import os

import pytest
import torch

from megarl.models.accelerators import layers_name
from megarl.models.shapes import write_random_checkpoint
from tests.helpers import DIST_WORKER, ON_TRANSFORMER_ENGINE, max_abs, mean_abs, run_layouts

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"), ON_TRANSFORMER_ENGINE]

SHAPES = ("qwen2.5-0.5b", "qwen3-0.6b")
IMPLS = {"local": "SDPAttention", "transformer_engine": "TEDotProductAttention"}
LENGTH_SCALE = 32  # sequences of 192..448 tokens


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("te")
    jobs, names = [], []
    for shape in SHAPES:
        model = write_random_checkpoint(shape, root / shape, dtype=torch.bfloat16)
        for impl in IMPLS:
            names.append((shape, impl))
            jobs.append((model, root / f"{shape}-{impl}.json", (1, 1, 1),
                         ["--bf16", "--length-scale", LENGTH_SCALE, "--transformer-impl", impl]))
    results = dict(zip(names, run_layouts(DIST_WORKER, jobs, nproc=1, timeout=900)))
    _write_rows(results)
    return results


def _write_rows(results):
    out_dir = os.environ.get("MEGARL_RESULTS_DIR")
    if not out_dir:
        return
    rows = []
    for (shape, impl), run in results.items():
        local = results[(shape, "local")]
        rows.append({
            "date": datetime.date.today().isoformat(),
            "commit": os.environ.get("MEGARL_COMMIT", "unknown"),
            "machine": os.environ.get("MEGARL_MACHINE", "nvidia-h200"),
            "command": "python -m pytest tests/gpu/test_transformer_engine_gpu.py",
            "what": "check-model",
            "model_shape": shape, "model_path": layers_name(impl), "core_attention": run["core_attention"],
            "rope_fusion": run["rope_fusion"], "dtype": "bf16",
            "tp": 1, "pp": 1, "cp": 1, "dp": 1, "seq_lengths": run["lengths"],
            "logprob_max_abs_diff": run["hf_max_abs_diff"], "logprob_mean_abs_diff": run["hf_mean_abs_diff"],
            "packed_vs_padded_max_abs_diff": run["packed_vs_padded"],
            "weight_check": "exact" if run["export_exact"] else "mismatch",
            "vs_local_logprob_max_abs_diff": max_abs(run["logprobs"], local["logprobs"]),
            "vs_local_actor_grad_norm_rel_diff": abs(run["actor_grad_norm"] - local["actor_grad_norm"])
            / local["actor_grad_norm"],
            "vs_local_critic_grad_norm_rel_diff": abs(run["critic_grad_norm"] - local["critic_grad_norm"])
            / local["critic_grad_norm"],
            "baseline": {"what": "hf-transformers bf16 vs the same fp32 reference",
                         "logprob_max_abs_diff": run["hf_bf16_max_abs_diff"],
                         "logprob_mean_abs_diff": run["hf_bf16_mean_abs_diff"]},
        })
    with open(os.path.join(out_dir, "transformer_engine_gpu.json"), "w") as f:
        json.dump(rows, f, indent=1)


def test_each_path_builds_its_own_attention_and_rotary_embedding(runs):
    for (shape, impl), run in runs.items():
        assert run["core_attention"] == IMPLS[impl], (shape, impl)
        assert run["rope_fusion"] == (impl == "transformer_engine"), (shape, impl)


def test_transformer_engine_error_is_that_of_hf_bf16(runs):
    for shape in SHAPES:
        run = runs[(shape, "transformer_engine")]
        assert run["export_exact"], shape
        assert run["hf_mean_abs_diff"] <= 1.5 * run["hf_bf16_mean_abs_diff"], (shape, run["hf_mean_abs_diff"])
        assert run["hf_max_abs_diff"] <= 1.5 * run["hf_bf16_max_abs_diff"], (shape, run["hf_max_abs_diff"])
        assert run["packed_vs_padded"] <= run["hf_bf16_max_abs_diff"], shape
        assert run["reference_offloaded_gpu_bytes"] == 0, shape


def test_transformer_engine_agrees_with_the_local_layers(runs):
    # Two bf16 computations, each within HF bf16's error of fp32, may differ by about twice it.
    for shape in SHAPES:
        te, local = runs[(shape, "transformer_engine")], runs[(shape, "local")]
        assert mean_abs(te["logprobs"], local["logprobs"]) <= 2 * local["hf_bf16_mean_abs_diff"], shape
        assert max_abs(te["logprobs"], local["logprobs"]) <= 2 * local["hf_bf16_max_abs_diff"], shape
        assert mean_abs(te["entropy"], local["entropy"]) <= 2 * local["hf_bf16_mean_abs_diff"], shape
        for key in ("actor_grad_norm", "critic_grad_norm"):
            assert abs(te[key] - local[key]) <= 2e-2 * local[key], (shape, key, te[key], local[key])
