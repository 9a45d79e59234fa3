"""Every parallel layout computes what one rank computes: log-probs, entropy, values, gradient norms and
the weights after an optimizer step (CPU, gloo, 2 processes, fp32), and matches HF transformers."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import REPO_ROOT

WORKER = Path(__file__).with_name("dist_worker.py")
LAYOUTS = {"tp2": (2, 1, 1), "pp2": (1, 2, 1), "cp2": (1, 1, 2), "dp2": (1, 1, 1)}
FAMILY_LAYOUTS = {"qwen2": ["tp2", "pp2", "cp2", "dp2"], "qwen3": ["tp2", "pp2", "cp2"], "llama": ["tp2", "pp2"]}


def make_model(family: str, path: Path) -> Path:
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    config_cls, model_cls = {
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM),
        "llama": (LlamaConfig, LlamaForCausalLM),
    }[family]
    torch.manual_seed(0)
    config = config_cls(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        tie_word_embeddings=family == "qwen3",  # Qwen2: untied, QKV bias; Qwen3: tied, QK-norm; Llama: untied
    )
    model_cls(config).save_pretrained(path)
    return path


def run_layout(model_dir: Path, out: Path, tp: int, pp: int, cp: int, nproc: int, extra=(), timeout=300) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), str(WORKER),
           str(model_dir), str(out), "--tp", str(tp), "--pp", str(pp), "--cp", str(cp), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module", params=sorted(FAMILY_LAYOUTS))
def family_runs(request, tmp_path_factory):
    family = request.param
    root = tmp_path_factory.mktemp(family)
    model_dir = make_model(family, root / "model")
    runs = {"single": run_layout(model_dir, root / "single.json", 1, 1, 1, nproc=1)}
    for name in FAMILY_LAYOUTS[family]:
        runs[name] = run_layout(model_dir, root / f"{name}.json", *LAYOUTS[name], nproc=2)
    return family, runs


def max_abs(a, b):
    return max(abs(x - y) for p, q in zip(a, b) for x, y in zip(p, q))


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
