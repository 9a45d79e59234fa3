import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from megarl.algorithms import (
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    agg_loss,
    compute_policy_loss,
    compute_value_loss,
    entropy_from_logits,
    token_weights,
)

LOSS = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0], [5.0, 5.0, 5.0, 5.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])


# verl's agg_loss on LOSS, MASK by hand: sequence sums S = (6, 4, 0) of n = (3, 1, 0) tokens; N = 4 tokens,
# G = 2 sequences (the fully masked row is not one), L = 4 columns.
@pytest.mark.parametrize(
    "mode, expected, dp_scaled",
    [
        ("token-mean", (1 + 2 + 3 + 4) / 4, True),
        ("seq-mean-token-sum", (6 + 4) / 2, True),  # the fully masked row is not a sequence
        ("seq-mean-token-mean", (2 + 4) / 2, True),
        ("seq-mean-token-sum-norm", (6 + 4) / 4, False),  # Dr.GRPO: Σ S / L, divided by neither G nor dp_size
    ],
)
def test_agg_loss_modes(mode, expected, dp_scaled):
    assert agg_loss(LOSS, MASK, mode).item() == pytest.approx(expected)
    assert agg_loss(LOSS, MASK, mode, dp_size=4).item() == pytest.approx((4 if dp_scaled else 1) * expected)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", (6 + 4) / 8 * 2),
        ("seq-mean-token-sum", (6 + 4) / 5 * 2),
        ("seq-mean-token-mean", (6 / 3 + 4 / 1) / 5 * 2),
        ("seq-mean-token-sum-norm", (6 + 4) / 16),
    ],
)
def test_agg_loss_takes_verls_global_counts(mode, expected):
    counts = {"dp_size": 2, "batch_num_tokens": 8, "global_batch_size": 5, "loss_scale_factor": 16}
    assert agg_loss(LOSS, MASK, mode, **counts).item() == pytest.approx(expected)


def test_agg_loss_empty_batch_is_zero_and_unknown_mode_fails():
    assert agg_loss(LOSS, torch.zeros_like(MASK), "token-mean").item() == 0.0
    assert agg_loss(LOSS, torch.zeros_like(MASK), "seq-mean-token-mean").item() == 0.0
    with pytest.raises(ValueError, match="unknown loss_agg_mode 'token-sum'"):
        agg_loss(LOSS, MASK, "token-sum")


@st.composite
def batch_and_split(draw):
    rows = draw(st.integers(1, 10))
    width = draw(st.integers(1, 6))
    lengths = draw(st.lists(st.integers(0, width), min_size=rows, max_size=rows))
    seed = draw(st.integers(0, 2**16))
    cuts = sorted(draw(st.sets(st.integers(1, rows - 1), max_size=rows - 1))) if rows > 1 else []
    return lengths, width, seed, cuts


@settings(max_examples=80, deadline=None)
@given(batch_and_split(), st.sampled_from(LOSS_AGG_MODES), st.integers(1, 4))
def test_token_weights_micro_batches_sum_to_full_batch(case, mode, dp_size):
    lengths, width, seed, cuts = case
    gen = torch.Generator().manual_seed(seed)
    loss = torch.randn(len(lengths), width, generator=gen, dtype=torch.float64)
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(width)] for n in lengths], dtype=torch.float64)
    full = (loss * token_weights(mask, mode, loss_scale_factor=width)).sum()
    # Split rows into micro-batches (as over DP ranks × micro-batches), each trimmed to its own padding.
    tokens, sequences = mask.sum(), (mask.sum(-1) > 0).sum()
    total = 0.0
    for lo, hi in zip([0, *cuts], [*cuts, len(lengths)]):
        used = max(1, max(lengths[lo:hi]))
        weights = token_weights(mask[lo:hi, :used], mode, tokens, sequences, loss_scale_factor=width)
        micro = agg_loss(loss[lo:hi, :used], mask[lo:hi, :used], mode, dp_size=dp_size, weights=weights)
        total = total + micro / dp_size
    assert float(total) == pytest.approx(float(full), rel=1e-9, abs=1e-9)


def test_policy_loss_at_ratio_one_is_minus_advantage():
    adv = torch.tensor([[1.0, -2.0, 0.5]])
    logp = torch.tensor([[-1.0, -2.0, -0.5]])
    mask = torch.ones(1, 3)
    pg_loss, clipfrac, ppo_kl, clipfrac_lower = compute_policy_loss(logp, logp.clone(), adv, mask)
    assert pg_loss.item() == pytest.approx(-adv.mean().item())
    assert clipfrac.item() == 0 and ppo_kl.item() == 0 and clipfrac_lower.item() == 0


def test_clip_higher_is_asymmetric():
    old = torch.zeros(1, 2)
    new = torch.log(torch.tensor([[1.25, 0.75]]))  # ratios 1.25 and 0.75
    adv = torch.tensor([[1.0, -1.0]])
    mask = torch.ones(1, 2)
    # Range [1-0.2, 1+0.28]: the ratio 1.25 is inside, 0.75 is clipped to 0.8 for A<0.
    new.requires_grad_(True)
    pg_loss, clipfrac, _, _ = compute_policy_loss(old, new, adv, mask, cliprange_low=0.2, cliprange_high=0.28)
    assert pg_loss.item() == pytest.approx((-1.25 + 0.8) / 2)
    assert clipfrac.item() == pytest.approx(0.5)
    pg_loss.backward()
    assert new.grad[0, 0] != 0 and new.grad[0, 1] == 0  # the clipped token gets no gradient


def test_dual_clip_bounds_negative_advantages():
    old = torch.zeros(1, 2)
    new = torch.log(torch.tensor([[10.0, 10.0]]))
    adv = torch.tensor([[-1.0, 1.0]])
    pg_loss, clipfrac, _, clipfrac_lower = compute_policy_loss(old, new, adv, torch.ones(1, 2), clip_ratio_c=3.0)
    # A<0: min(-A·c, max(-A·r, -A·clip(r))) = min(3, 10) = 3; A>0: max(-10, -1.2) = -1.2.
    assert pg_loss.item() == pytest.approx((3.0 - 1.2) / 2)
    assert clipfrac_lower.item() == pytest.approx(0.5)
    assert clipfrac.item() == pytest.approx(0.5)  # the standard clip engages only for A>0 here
    with pytest.raises(ValueError, match="clip_ratio_c"):
        compute_policy_loss(old, new, adv, torch.ones(1, 2), clip_ratio_c=1.0)


def test_policy_loss_respects_global_normalisation_and_registry():
    old = torch.zeros(2, 3)
    adv = torch.ones(2, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    local, *_ = compute_policy_loss(old, old, adv, mask, batch_num_tokens=torch.tensor(6.0))
    assert local.item() == pytest.approx(-3 / 6)
    assert POLICY_LOSSES.get("vanilla") is compute_policy_loss


def test_value_loss_clips_against_old_values():
    vpreds = torch.tensor([[2.0, 0.0]])
    values = torch.tensor([[0.0, 0.0]])
    returns = torch.tensor([[1.0, 1.0]])
    vf_loss, vf_clipfrac = compute_value_loss(vpreds, returns, values, torch.ones(1, 2), cliprange_value=0.5)
    # token 0: max((2-1)², (0.5-1)²) = 1; token 1: max(1, 1) = 1.
    assert vf_loss.item() == pytest.approx(0.5 * 1.0)
    assert vf_clipfrac.item() == 0.0
    vpreds = torch.tensor([[1.4, -0.2]])
    vf_loss, vf_clipfrac = compute_value_loss(vpreds, returns, values, torch.ones(1, 2), cliprange_value=0.5)
    # token 0: clipped 0.5 → (0.5)² > (0.4)²; token 1: unclipped (1.2)² > clipped (1.2)²? equal → not counted.
    assert vf_loss.item() == pytest.approx(0.5 * (0.25 + 1.44) / 2)
    assert vf_clipfrac.item() == pytest.approx(0.5)


def test_entropy_from_logits():
    logits = torch.randn(4, 7, 11, dtype=torch.float64)
    expected = torch.distributions.Categorical(logits=logits).entropy()
    torch.testing.assert_close(entropy_from_logits(logits), expected)
    assert entropy_from_logits(torch.zeros(3, 50)).allclose(torch.full((3,), math.log(50)))
