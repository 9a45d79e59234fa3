"""Advantage estimators, with verl's names, signatures and semantics.

Every estimator takes [batch, response_length] tensors and returns (advantages, returns) of that shape.
Group-based estimators take `index`: one group id per sample (the prompt's uid); any hashable ids work.
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import torch

from megarl.algorithms.masked import masked_whiten
from megarl.registry import Registry

ADV_ESTIMATORS: Registry = Registry("advantage estimator")
register_adv_est = ADV_ESTIMATORS.register


def _group_ids(index: Sequence[Any] | torch.Tensor, device: torch.device) -> torch.Tensor:
    keys = index.tolist() if hasattr(index, "tolist") else list(index)
    dense: dict[Any, int] = {}
    return torch.tensor([dense.setdefault(key, len(dense)) for key in keys], dtype=torch.long, device=device)


def _group_stats(scores: torch.Tensor, index) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample (group mean, unbiased group std, group size) in float64, vectorised over groups: the squares of
    float32 scores above ~1.8e19 overflow float32, which made every std infinite and every advantage 0."""
    gid = _group_ids(index, scores.device)
    if gid.numel() != scores.numel():
        raise ValueError(f"index has {gid.numel()} group ids for {scores.numel()} samples")
    scores = scores.double()
    num_groups = int(gid.max()) + 1 if gid.numel() else 0
    zeros = scores.new_zeros(num_groups)
    size = zeros.scatter_add(0, gid, torch.ones_like(scores))
    mean = zeros.scatter_add(0, gid, scores) / size
    centered = scores - mean[gid]
    var = zeros.scatter_add(0, gid, centered * centered) / (size - 1).clamp(min=1)
    return mean[gid], var.sqrt()[gid], size[gid]


@register_adv_est("gae")
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation; masked positions carry the running value and GAE through."""
    with torch.no_grad():
        next_values = torch.zeros_like(values[:, 0])
        last_gae = torch.zeros_like(values[:, 0])
        advantages_reversed = []
        for t in reversed(range(token_level_rewards.shape[-1])):
            mask_t = response_mask[:, t]
            delta = token_level_rewards[:, t] + gamma * next_values - values[:, t]
            gae_t = delta + gamma * lam * last_gae
            next_values = values[:, t] * mask_t + (1 - mask_t) * next_values
            last_gae = gae_t * mask_t + (1 - mask_t) * last_gae
            advantages_reversed.append(last_gae)
        advantages = torch.stack(advantages_reversed[::-1], dim=1)
        returns = advantages + values
        advantages = masked_whiten(advantages, response_mask)
    return advantages, returns


@register_adv_est("grpo")
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: the sequence score minus its group mean, divided by the group std unless
    `norm_adv_by_std_in_grpo` is off (Dr.GRPO). A singleton group has mean 0 and std 1, as in verl."""
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        mean, std, size = _group_stats(scores, index)
        singleton = size <= 1
        mean = torch.where(singleton, torch.zeros_like(mean), mean)
        std = torch.where(singleton, torch.ones_like(std), std)
        advantage = scores - mean
        if norm_adv_by_std_in_grpo:
            advantage = advantage / (std + epsilon)
        advantages = advantage.to(token_level_rewards.dtype).unsqueeze(-1) * response_mask
    return advantages, advantages


@register_adv_est("rloo")
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: each score minus the mean of the other samples of its group (a singleton keeps its score)."""
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        mean, _, size = _group_stats(scores, index)
        leave_one_out = (scores - mean) * size / (size - 1).clamp(min=1)
        advantage = torch.where(size > 1, leave_one_out, scores.double())
        advantages = advantage.to(token_level_rewards.dtype).unsqueeze(-1) * response_mask
    return advantages, advantages


@register_adv_est("reinforce_plus_plus")
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted returns, reset after the end of each response, whitened over the batch."""
    with torch.no_grad():
        returns = torch.zeros_like(token_level_rewards)
        running = torch.zeros_like(token_level_rewards[:, 0])
        for t in reversed(range(token_level_rewards.shape[-1])):
            running = token_level_rewards[:, t] + gamma * running
            returns[:, t] = running
            running = running * response_mask[:, t]
        advantages = masked_whiten(returns, response_mask) * response_mask
    return advantages, returns


@register_adv_est("reinforce_plus_plus_baseline")
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group-mean baseline, then whitened over the batch."""
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        mean, _, size = _group_stats(scores, index)
        baseline = torch.where(size > 1, mean, torch.zeros_like(mean))
        advantages = (scores - baseline).to(token_level_rewards.dtype).unsqueeze(-1) * response_mask
        advantages = masked_whiten(advantages, response_mask) * response_mask
    return advantages, advantages


@register_adv_est("remax")
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor,
    reward_baselines: torch.Tensor,
    response_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax: reward-to-go minus the reward of the greedy response to the same prompt."""
    with torch.no_grad():
        returns = (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
        advantages = returns - reward_baselines.unsqueeze(-1) * response_mask
    return advantages, returns


def compute_advantage(adv_estimator: str, **inputs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the registered estimator `adv_estimator`, passing it the inputs its signature names.

    `inputs` may hold more than one estimator needs (values, index, reward_baselines, gamma, lam, ...);
    a missing required input is an error naming it.
    """
    estimator = ADV_ESTIMATORS.get(adv_estimator)
    params = inspect.signature(estimator).parameters
    missing = [
        name for name, p in params.items() if p.default is inspect.Parameter.empty and inputs.get(name) is None
    ]
    if missing:
        raise ValueError(f"advantage estimator {adv_estimator!r} needs {', '.join(missing)}")
    return estimator(**{name: inputs[name] for name in params if inputs.get(name) is not None})
