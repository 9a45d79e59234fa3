import math

import pytest
import torch

from megarl.rollout.gates import check_logprob_agreement, logprob_agreement


def test_mult_error_is_the_masked_mean_of_exp_abs_diff():
    rollout = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, 0.0]])
    trainer = torch.tensor([[-1.1, -2.0, -9.0], [-0.5, -0.7, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    metrics = logprob_agreement(rollout, trainer, mask)
    expected = (math.exp(0.1) + 1 + 1 + math.exp(0.2)) / 4
    assert metrics["rollout/logprob_mult_error"] == pytest.approx(expected, rel=1e-6)
    assert metrics["rollout/logprob_max_abs_diff"] == pytest.approx(0.2, rel=1e-5)
    assert logprob_agreement(rollout, trainer, torch.zeros_like(mask))["rollout/logprob_mult_error"] == 1.0


def test_breach_is_an_error_when_asked():
    check_logprob_agreement({"rollout/logprob_mult_error": 1.04, "rollout/logprob_max_abs_diff": 0.3}, 1.05)
    with pytest.raises(RuntimeError, match="logprob_mult_error=1.2000 exceeds 1.05"):
        check_logprob_agreement({"rollout/logprob_mult_error": 1.2, "rollout/logprob_max_abs_diff": 0.3}, 1.05)


def test_tool_tokens_do_not_count_in_the_gate():
    """Multi-turn: tool tokens (mask 0) carry rollout log-prob 0 and whatever the trainer computes there; the gate
    reads the model's tokens alone."""
    rollout = torch.tensor([[-1.0, -0.5, 0.0, 0.0, -0.2]])
    model_only = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0]])
    trainer = torch.tensor([[-1.1, -0.5, -9.0, -7.0, -0.25]])
    gate = logprob_agreement(rollout, trainer, model_only)
    alone = logprob_agreement(rollout[:, [0, 1, 4]], trainer[:, [0, 1, 4]], torch.ones(1, 3))
    assert gate == pytest.approx(alone)
