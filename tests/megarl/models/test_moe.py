"""Qwen3-MoE through the bridge (megarl/models/bridge.py's `Qwen3Moe`): a tiny model of 4 experts, 2 per token, on
megatron's per-expert loop without Transformer Engine, gives HF transformers' log-probs and exports its checkpoint
back exactly, in one process and with its experts split over two tensor-parallel or two expert-parallel ranks or
both (EP 2 × TP 2 on four processes), with its sequences split over two context-parallel ranks, and with its layers
over two pipeline stages (also with each stage's experts split over EP 2: four processes); the router matches HF's
with and without renormalized top-k probabilities (`norm_topk_prob`)."""

import json
import sys

import pytest

from parallel.topology import free_port
from tests.helpers import ENV, make_model, run_command


def run_check(model, processes: int, *args: str):
    """`megarl check-model` in fp32 on `processes` ranks under torchrun."""
    return run_command([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(processes),
                        "--master-port", str(free_port()), "-m", "megarl.models.check", "--hf", str(model),
                        "--dtype", "fp32", *args], timeout=300, env=ENV)


def check_model(model, tmp_path, processes: int, *args: str) -> dict:
    report = tmp_path / "report.json"
    proc = run_check(model, processes, "--json", str(report), *args)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(report.read_text())


# (norm_topk_prob, processes, layout): experts split over two tensor-parallel ranks, or two expert-parallel ranks
# holding two experts each, or both (four ranks: each holds two experts' halves); the sequences split over two
# context-parallel ranks; a layer on each of two pipeline stages, alone and with each stage's experts split over two
# expert-parallel ranks; the router without renormalization in one process
LAYOUTS = [(True, 2, {"tp": 2, "ep": 1}), (True, 2, {"tp": 1, "ep": 2}), (True, 4, {"tp": 2, "ep": 2}),
           (True, 2, {"cp": 2}), (True, 2, {"pp": 2}), (True, 4, {"pp": 2, "ep": 2}), (False, 1, {"tp": 1, "ep": 1})]


@pytest.mark.parametrize("norm_topk_prob, processes, layout", LAYOUTS)
def test_a_tiny_qwen3_moe_matches_hf_and_exports_exactly(tmp_path, norm_topk_prob, processes, layout):
    model = make_model("qwen3_moe", tmp_path / "model", norm_topk_prob=norm_topk_prob)
    sizes = [arg for key, size in layout.items() for arg in (f"--{key}", str(size))]
    report = check_model(model, tmp_path, processes, *sizes)
    assert {key: report[key] for key in layout} == layout and report["weight_check"] == "exact"
    assert report["logprob_max_abs_diff"] <= 1e-5, report
