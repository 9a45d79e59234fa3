"""Trainer → rollout weight sync on CPU (gloo, fp32, 2 processes): after one optimizer step, the transformers
engines fed by the reshard layer hold exactly the trainer's weights and their log-probs of what they sample
equal the trainer's, for every training layout → rollout TP pairing."""

import pytest

from tests.helpers import REPO_ROOT, make_model, run_layouts

WORKER = REPO_ROOT / "tests/megarl/rollout/sync_worker.py"
LAYOUTS = {  # name: (train TP, PP, rollout TP)
    "tp2-to-tp1": (2, 1, 1),
    "tp2-to-tp2": (2, 1, 2),
    "pp2-to-tp1": (1, 2, 1),
    "dp2-to-tp2": (1, 1, 2),
}


FAMILIES = ["qwen2", "qwen3"]


def run_sync(model_dir, out, tp, pp, rollout_tp, nproc=2) -> dict:
    return run_layouts(WORKER, [(model_dir, out, (tp, pp, 1), ["--rollout-tp", rollout_tp])], nproc)[0]


@pytest.fixture(scope="module")
def every_sync(tmp_path_factory):
    """(family, layout): the sync's results. All of them in one 2-process launch: a launch each would add a
    process start-up each."""
    root = tmp_path_factory.mktemp("sync")
    models = {family: make_model(family, root / family / "model") for family in FAMILIES}
    cases = [(family, layout) for family in FAMILIES for layout in sorted(LAYOUTS)]
    jobs = [(models[family], root / family / f"{layout}.json", (*LAYOUTS[layout][:2], 1),
             ["--rollout-tp", LAYOUTS[layout][2]]) for family, layout in cases]
    return dict(zip(cases, run_layouts(WORKER, jobs, nproc=2, timeout=600)))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("family", FAMILIES)
def test_engines_match_the_trainer_after_sync(every_sync, family, layout):
    tp, pp, rollout_tp = LAYOUTS[layout]
    result = every_sync[family, layout]
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
