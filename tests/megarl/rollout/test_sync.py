"""Trainer → rollout weight sync on CPU (gloo, fp32, 2 processes): after one optimizer step, the transformers
engines fed by the reshard layer hold exactly the trainer's weights and their log-probs of what they sample
equal the trainer's, for every training layout → rollout TP pairing."""

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT, make_model

WORKER = REPO_ROOT / "tests/megarl/rollout/sync_worker.py"
LAYOUTS = {  # name: (train TP, PP, rollout TP)
    "tp2-to-tp1": (2, 1, 1),
    "tp2-to-tp2": (2, 1, 2),
    "pp2-to-tp1": (1, 2, 1),
    "dp2-to-tp2": (1, 1, 2),
}


@pytest.fixture(scope="module", params=["qwen2", "qwen3"])
def model_dir(request, tmp_path_factory):
    return make_model(request.param, tmp_path_factory.mktemp(request.param) / "model")


def run_sync(model_dir, out, tp, pp, rollout_tp, nproc=2) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), str(WORKER),
           str(model_dir), str(out), "--tp", str(tp), "--pp", str(pp), "--rollout-tp", str(rollout_tp)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_engines_match_the_trainer_after_sync(model_dir, tmp_path, layout):
    tp, pp, rollout_tp = LAYOUTS[layout]
    result = run_sync(model_dir, tmp_path / "sync.json", tp, pp, rollout_tp)
    assert result["owners"] == 2 // rollout_tp and result["tokens"] > 0
    assert result["weights_exact"]  # every engine holds the trainer's exported HF tensors bit for bit
    assert result["logprob_max_abs_diff"] <= 1e-5
    assert result["held_before"] > 0 and result["held_released"] == 0  # release frees the engine's weights
    assert result["buckets"] > 1  # streamed in bounded buckets (4 KiB here), not as one state dict
    if pp == 1 and (tp == rollout_tp or tp == 1):
        assert result["bytes_received"] == 0  # own shards only: nothing gathered
    else:
        assert result["bytes_received"] > 0  # gathered within the sub-group / broadcast from the owning stage


def test_strided_engines_gather_only_within_sub_groups(tmp_path):
    """Training TP 4 → rollout TP 2 on 4 processes: engines on GPUs {0, 2} and {1, 3}, each rank all-gathers with
    one neighbour only (the 3D-HybridEngine layout)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, head_dim=16, max_position_embeddings=256)
    Qwen2ForCausalLM(config).save_pretrained(tmp_path / "model")
    result = run_sync(tmp_path / "model", tmp_path / "sync.json", 4, 1, 2, nproc=4)
    assert result["slot"] == [0, 0, 1, 1] and result["owners"] == 2
    assert result["weights_exact"] and result["logprob_max_abs_diff"] <= 1e-5
    assert 0 < result["bytes_received"]
