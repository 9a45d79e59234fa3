import math

import pytest
import torch

from megarl.algorithms.rollout_correction import rollout_correction

MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ROLLOUT = torch.zeros(2, 3)
# log π_old − log π_rollout per token: ratios e^0.5, 1, e^-0.1 | e^2, e^-3 (and padding)
OLD = torch.tensor([[0.5, 0.0, -0.1], [2.0, -3.0, 9.0]])


def correct(**options):
    settings = {"is_level": None, "is_threshold": 2.0, "rs_level": None, "rs_upper": 2.0, "rs_lower": 0.5,
                "veto_threshold": None, **options}
    return rollout_correction(OLD, ROLLOUT, MASK, **settings)


def test_token_weights_are_truncated_ratios_zero_at_padding():
    result = correct(is_level="token")
    expected = torch.tensor([[math.exp(0.5), 1.0, math.exp(-0.1)], [2.0, math.exp(-3.0), 0.0]])
    assert torch.allclose(result.weights, expected) and torch.equal(result.keep, MASK)
    assert result.metrics["rollout_corr/rollout_is_max"] == pytest.approx(2.0)
    assert result.metrics["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(1 / 5)  # e^2 only
    assert result.metrics["rollout_corr/kl"] == pytest.approx(-(0.5 + 0 - 0.1 + 2 - 3) / 5)


def test_sequence_weights_are_the_product_of_the_ratios():
    weights = correct(is_level="sequence", is_threshold=10.0).weights
    assert torch.allclose(weights[0], torch.full((3,), math.exp(0.4)))
    assert torch.allclose(weights[1], torch.tensor([math.exp(-1.0), math.exp(-1.0), 0.0]))


@pytest.mark.parametrize(("level", "kept"), [
    ("token", [[1, 1, 1], [0, 0, 0]]),  # e^2 and e^-3 fall outside [0.5, 2]
    ("sequence", [[1, 1, 1], [0, 0, 0]]),  # e^0.4 inside; e^-1 below 0.5
    ("geometric", [[1, 1, 1], [1, 1, 0]]),  # per-token means e^0.133 and e^-0.5 = 0.61, both inside
])
def test_rejection_drops_tokens_or_sequences_outside_the_bounds(level, kept):
    result = correct(rs_level=level)
    assert torch.equal(result.keep, torch.tensor(kept, dtype=MASK.dtype))
    assert result.weights is None


def test_a_vetoed_token_drops_its_sequence():
    result = correct(veto_threshold=0.01)  # e^-3 = 0.05 passes; a threshold of 0.1 vetoes it
    assert torch.equal(result.keep, MASK)
    result = correct(veto_threshold=0.1)
    assert torch.equal(result.keep, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    assert result.metrics["rollout_corr/veto_fraction"] == 0.5
    assert result.metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(2 / 5)
