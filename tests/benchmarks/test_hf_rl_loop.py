"""benchmarks/hf_rl_loop.py, the plain HF-transformers RL step that benchmarks/rl_step.py sets the recipe's step
against: it generates every response to full length and trains on them."""

import sys

import torch

from tests.helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from hf_rl_loop import _generate, _policy_gradient_pass, hf_rl_step  # noqa: E402


def tiny_model(tmp_path):
    from megarl.models.shapes import write_random_checkpoint

    return write_random_checkpoint("tiny", tmp_path / "model")


def test_every_response_runs_to_full_length_after_its_left_padded_prompt(tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model(tmp_path))
    sequences, mask, width = _generate(model, [[5, 6, 7], [8]], n=2, max_new_tokens=6, temperature=1.0, pad_id=0)
    assert sequences.shape == (4, 3 + 6) and width == 3
    assert mask.sum(dim=1).tolist() == [9, 9, 7, 7]
    assert sequences[2:, :3].tolist() == [[0, 0, 8]] * 2


def test_the_step_counts_prompt_and_response_tokens_in_bounded_generate_calls(tmp_path, monkeypatch):
    import hf_rl_loop

    monkeypatch.setattr(hf_rl_loop, "GENERATE_SEQUENCES", 4)  # two prompts of n=2 a call
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    row = hf_rl_step(tiny_model(tmp_path), prompts, n=2, max_new_tokens=5, temperature=1.0, token_budget=20)
    assert row["tokens"] == 2 * (3 + 2 + 4) + 6 * 5
    assert row["generate_calls"] == 2
    assert row["step_s"] == row["gen_s"] + row["train_s"] > 0
    assert row["tokens_per_s_per_gpu"] == row["tokens"] / row["step_s"]


def test_the_policy_gradient_pass_changes_the_weights(tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model(tmp_path))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = [p.detach().clone() for p in model.parameters()]
    sequences, mask, width = _generate(model, [[5, 6, 7], [8]], n=2, max_new_tokens=4, temperature=1.0, pad_id=0)
    _policy_gradient_pass(model, optimizer, [(sequences, mask, width)], token_budget=7)
    changed = [not torch.equal(b, p) for b, p in zip(before, model.parameters())]
    assert sum(changed) > len(changed) // 2
