"""Rollout correction for the gap between the engine that sampled a batch (π_rollout) and the trainer's policy that
the PPO ratio is anchored at (π_old): numerics (bf16 kernels, another backend) and, off-policy, staleness. Names
and semantics follow verl's `algorithm.rollout_correction` ("decoupled" mode: three policies, π_old recomputed).

- Importance weights ρ = π_old / π_rollout per token (`token`) or per sequence (`sequence`: the product over its
  tokens), bounded to [e⁻²⁰, e²⁰] and truncated at `is_threshold`; they multiply each token's policy-gradient loss.
- Rejection (`rs`): tokens (`token`), sequences (`sequence`: the product of ratios) or sequences by their per-token
  geometric mean (`geometric`) whose ratio falls outside [lower, upper] leave the loss, denominators included.
- Veto: a sequence with any token whose ratio is below `veto_threshold` leaves the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from megarl.algorithms.masked import masked_mean

SAFETY_BOUND = 20.0  # log-space bound on ratios before exponentiating
IS_LEVELS = ("token", "sequence")
RS_LEVELS = ("token", "sequence", "geometric")


@dataclass(frozen=True)
class Correction:
    weights: torch.Tensor | None  # [B, R] importance weights (0 at padding); None without `is_level`
    keep: torch.Tensor  # [B, R] float: the response mask less the rejected tokens
    metrics: dict[str, float]


def rollout_correction(old_log_probs: torch.Tensor, rollout_log_probs: torch.Tensor, response_mask: torch.Tensor, *,
                       is_level: str | None, is_threshold: float, rs_level: str | None, rs_upper: float,
                       rs_lower: float, veto_threshold: float | None) -> Correction:
    mask = response_mask.bool()
    log_ratio = (old_log_probs - rollout_log_probs).masked_fill(~mask, 0.0)
    lengths = response_mask.sum(-1).clamp(min=1)
    sequence_log_ratio = log_ratio.sum(-1)
    metrics = {"rollout_corr/kl": masked_mean(-log_ratio, response_mask).item()}
    weights = None
    if is_level is not None:
        level = log_ratio if is_level == "token" else sequence_log_ratio[:, None].expand_as(log_ratio)
        raw = torch.exp(level.clamp(-SAFETY_BOUND, SAFETY_BOUND))
        weights = raw.clamp(max=is_threshold) * response_mask
        metrics.update(_weight_metrics(weights, raw, response_mask, is_threshold))
    keep = mask.clone()
    if rs_level is not None:
        by_level = {"token": log_ratio, "sequence": sequence_log_ratio[:, None],
                    "geometric": (sequence_log_ratio / lengths)[:, None]}
        ratio = torch.exp(by_level[rs_level].clamp(-SAFETY_BOUND, SAFETY_BOUND))
        keep &= (ratio >= rs_lower) & (ratio <= rs_upper)
    if veto_threshold is not None:
        vetoed = ((torch.exp(log_ratio) < veto_threshold) & mask).any(-1)
        keep &= ~vetoed[:, None]
        metrics["rollout_corr/veto_fraction"] = vetoed.float().mean().item()
    if rs_level is not None or veto_threshold is not None:
        rejected = mask & ~keep
        metrics["rollout_corr/rollout_rs_masked_fraction"] = masked_mean(rejected.float(), response_mask).item()
        metrics["rollout_corr/rollout_rs_seq_masked_fraction"] = rejected.any(-1).float().mean().item()
    return Correction(weights, keep.to(response_mask.dtype), metrics)


def _weight_metrics(weights: torch.Tensor, raw: torch.Tensor, mask: torch.Tensor, threshold: float) -> dict:
    valid = weights[mask.bool()]
    return {"rollout_corr/rollout_is_mean": valid.mean().item(), "rollout_corr/rollout_is_max": valid.max().item(),
            "rollout_corr/rollout_is_min": valid.min().item(),
            "rollout_corr/rollout_is_std": valid.std(unbiased=False).item(),
            "rollout_corr/rollout_is_ratio_fraction_high": masked_mean((raw > threshold).float(), mask).item()}
