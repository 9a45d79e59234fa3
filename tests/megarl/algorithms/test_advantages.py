import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from megarl.algorithms import (
    compute_advantage,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    masked_mean,
)
from megarl.registry import UnknownNameError


def outcome_rewards(scores, lengths, width=5):
    """Token-level rewards with each score on the last valid token, and the response mask."""
    rewards = torch.zeros(len(scores), width)
    mask = torch.zeros(len(scores), width)
    for i, (score, length) in enumerate(zip(scores, lengths)):
        mask[i, :length] = 1
        if length:
            rewards[i, length - 1] = score
    return rewards, mask


def grpo_loop_reference(scores, index, norm_by_std, eps=1e-6):
    """verl's per-sample loop, kept as the specification."""
    groups = {}
    for s, g in zip(scores, index):
        groups.setdefault(g, []).append(s)
    out = []
    for s, g in zip(scores, index):
        members = torch.tensor(groups[g])
        mean, std = (members.mean(), members.std()) if len(members) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        out.append(float((s - mean) / (std + eps)) if norm_by_std else float(s - mean))
    return torch.tensor(out)


groups_strategy = st.lists(
    st.tuples(st.integers(0, 4), st.sampled_from([0.0, 0.5, 1.0, -1.0, 2.0])), min_size=1, max_size=24
)


@settings(max_examples=60, deadline=None)
@given(groups_strategy, st.booleans())
def test_grpo_matches_verl_loop(samples, norm_by_std):
    index = [g for g, _ in samples]
    scores = [s for _, s in samples]
    rewards, mask = outcome_rewards(scores, [3] * len(scores))
    adv, ret = compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm_by_std)
    expected = grpo_loop_reference(scores, index, norm_by_std)
    assert torch.isfinite(adv).all()
    torch.testing.assert_close(adv[:, 0], expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(adv, ret)
    assert (adv[:, 3:] == 0).all()


def test_grpo_edge_groups_are_finite():
    # A singleton group keeps its raw score (mean 0, std 1); an all-equal group gets zero advantage.
    rewards, mask = outcome_rewards([1.0, 1.0, 1.0, 0.7], [2, 2, 2, 2])
    adv, _ = compute_grpo_outcome_advantage(rewards, mask, ["a", "a", "a", "b"])
    assert torch.isfinite(adv).all()
    assert torch.allclose(adv[:3], torch.zeros(3, 5))
    assert adv[3, 0].item() == pytest.approx(0.7, rel=1e-5)


def test_grpo_accepts_string_uids_and_masks_empty_responses():
    uids = np.array(["u1", "u1", "u2", "u2"], dtype=object)
    rewards, mask = outcome_rewards([1.0, 0.0, 1.0, 0.0], [3, 0, 2, 5])
    adv, _ = compute_grpo_outcome_advantage(rewards, mask, uids)
    assert (adv[1] == 0).all()  # empty response: nothing to push
    assert adv[0, 0] > 0 and adv[3, 0] < 0
    assert torch.equal(adv != 0, mask.bool())


def test_drgrpo_subtracts_group_mean_only():
    rewards, mask = outcome_rewards([1.0, 0.0, 0.0, 0.0], [1, 1, 1, 1])
    adv, _ = compute_grpo_outcome_advantage(rewards, mask, [0, 0, 0, 0], norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.75, -0.25, -0.25, -0.25]))


@settings(max_examples=60, deadline=None)
@given(groups_strategy)
def test_rloo_is_score_minus_mean_of_others(samples):
    index = [g for g, _ in samples]
    scores = [s for _, s in samples]
    rewards, mask = outcome_rewards(scores, [2] * len(scores))
    adv, _ = compute_rloo_outcome_advantage(rewards, mask, index)
    for i, (g, s) in enumerate(samples):
        others = [t for j, (h, t) in enumerate(samples) if h == g and j != i]
        expected = s - sum(others) / len(others) if others else s
        assert adv[i, 0].item() == pytest.approx(expected, abs=1e-5)
        assert adv[i, 1].item() == pytest.approx(expected, abs=1e-5)


def test_reinforce_plus_plus_baseline_whitens_group_centred_scores():
    rewards, mask = outcome_rewards([1.0, 0.0, 1.0, 1.0], [2, 3, 1, 4])
    adv, _ = compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, [0, 0, 1, 1])
    assert torch.isfinite(adv).all()
    assert masked_mean(adv, mask).abs() < 1e-5
    assert (adv[mask == 0] == 0).all()
    # Group 1 is all-equal: centred to 0 before whitening, so it sits at minus the batch mean of group 0's.
    assert adv[0, 0] > 0 > adv[1, 0]
    assert adv[2, 0] == pytest.approx(adv[3, 0].item())


def gae_reference(rewards, values, mask, gamma, lam):
    """Per-sample GAE over the valid tokens only (a sample's tokens are contiguous here)."""
    adv = torch.zeros_like(rewards)
    for i in range(rewards.shape[0]):
        valid = mask[i].nonzero().flatten().tolist()
        last = 0.0
        for k in reversed(range(len(valid))):
            t = valid[k]
            next_value = values[i, valid[k + 1]] if k + 1 < len(valid) else 0.0
            delta = rewards[i, t] + gamma * next_value - values[i, t]
            last = delta + gamma * lam * last
            adv[i, t] = last
    return adv


def test_gae_returns_match_reference_and_advantages_are_whitened():
    torch.manual_seed(0)
    rewards, mask = outcome_rewards([1.0, -0.5, 2.0], [5, 3, 1])
    values = torch.randn(3, 5)
    adv, ret = compute_gae_advantage_return(rewards, values, mask, gamma=0.9, lam=0.8)
    raw = gae_reference(rewards, values, mask, 0.9, 0.8)
    torch.testing.assert_close(ret * mask, (raw + values) * mask)
    assert masked_mean(adv, mask).abs() < 1e-5
    whitened_again = (raw - masked_mean(raw, mask)) / ((raw - masked_mean(raw, mask)) ** 2 * mask).sum().div(
        mask.sum() - 1
    ).sqrt()
    torch.testing.assert_close(adv * mask, whitened_again * mask, atol=1e-4, rtol=1e-4)


def test_gae_skips_masked_observation_tokens():
    # Token 1 is masked (e.g. a tool observation): it must not break the chain between tokens 0 and 2.
    rewards = torch.tensor([[0.0, 5.0, 1.0]])
    values = torch.tensor([[0.5, 9.0, 0.25]])
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    _, ret = compute_gae_advantage_return(rewards, values, mask, gamma=1.0, lam=1.0)
    assert ret[0, 2].item() == pytest.approx(1.0)
    assert ret[0, 0].item() == pytest.approx(1.0)  # reward-to-go through the masked token, ignoring its 5.0


def test_reinforce_plus_plus_resets_after_each_response():
    rewards, mask = outcome_rewards([1.0, 2.0], [3, 2])
    _, returns = compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma=0.5)
    torch.testing.assert_close(returns[0, :3], torch.tensor([0.25, 0.5, 1.0]))
    torch.testing.assert_close(returns[1, :2], torch.tensor([1.0, 2.0]))


def test_remax_subtracts_greedy_baseline_on_valid_tokens():
    rewards, mask = outcome_rewards([1.0, 0.0], [2, 3])
    adv, returns = compute_remax_outcome_advantage(rewards, torch.tensor([0.25, 0.5]), mask)
    torch.testing.assert_close(returns[0], torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0]))
    torch.testing.assert_close(adv[0], torch.tensor([0.75, 0.75, 0.0, 0.0, 0.0]))
    torch.testing.assert_close(adv[1], torch.tensor([-0.5, -0.5, -0.5, 0.0, 0.0]))


@pytest.mark.parametrize("name", ["gae", "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax"])
def test_every_estimator_is_finite_with_empty_and_full_rows(name):
    rewards, mask = outcome_rewards([1.0, 0.0, 1.0, 0.5], [0, 5, 1, 0])
    adv, ret = compute_advantage(
        name,
        token_level_rewards=rewards,
        response_mask=mask,
        values=torch.zeros_like(rewards),
        index=[0, 0, 1, 2],
        reward_baselines=torch.zeros(4),
        gamma=1.0,
        lam=0.95,
        norm_adv_by_std_in_grpo=True,
    )
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    assert (adv * (1 - mask)).abs().max() < 1e3


def test_all_rows_empty_is_finite():
    rewards, mask = outcome_rewards([0.0, 0.0], [0, 0])
    adv, _ = compute_reinforce_plus_plus_outcome_advantage(rewards, mask, gamma=1.0)
    assert torch.equal(adv, torch.zeros_like(adv))


def test_dispatch_names_missing_inputs_and_suggests_typos():
    rewards, mask = outcome_rewards([1.0], [1])
    with pytest.raises(ValueError, match="'gae' needs values"):
        compute_advantage("gae", token_level_rewards=rewards, response_mask=mask, gamma=1.0, lam=1.0)
    with pytest.raises(UnknownNameError, match="Did you mean 'grpo'"):
        compute_advantage("grp", token_level_rewards=rewards, response_mask=mask)


@pytest.mark.parametrize("name", ["gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"])
def test_huge_rewards_give_the_advantages_of_their_scaled_down_copies(name):
    """Normalised advantages do not depend on the rewards' scale: a reward of 1e30 (whose square overflows float32)
    trains as a reward of 1 does, instead of every advantage becoming 0."""
    def advantages(scale):
        rewards, mask = outcome_rewards([scale, 0.0, 0.0, scale, scale, 0.0], [2, 3, 1, 3, 2, 2])
        adv, _ = compute_advantage(name, token_level_rewards=rewards, response_mask=mask,
                                   values=torch.zeros_like(rewards), index=[0, 0, 0, 1, 1, 1], gamma=1.0, lam=1.0)
        return adv

    huge, unit = advantages(1e30), advantages(1.0)
    assert torch.isfinite(huge).all() and huge.abs().max() > 0.1
    torch.testing.assert_close(huge, unit, rtol=1e-4, atol=1e-5)
