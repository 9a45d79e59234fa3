"""Policy, value and entropy losses, and verl's loss-aggregation modes.

`agg_loss` is verl's public function (verl v0.7.0, unchanged through commit b178a3cd of 2026-01-29), with its
arguments and results: `batch_num_tokens` and `global_batch_size` are the whole mini-batch's response tokens and
non-empty sequences (summed over micro-batches and data-parallel ranks), and `dp_size` multiplies the result, for
gradient reductions that average over data-parallel ranks.

The training loop does not aggregate with it: `token_weights` gives each response token its weight from the
mini-batch's global counts, and the loss is Σ weight · loss (`agg_loss(..., weights=...)`). Being per token, the
weights survive any micro-batch, packing or context-parallel split, so the loss does not depend on the layout.
For seq-mean-token-sum-norm the weights also divide by the global sequence count: verl leaves that mean over
sequences to its trainer, which averages the per-micro-batch results of `agg_loss`.
"""

from __future__ import annotations

import torch

from megarl.algorithms.masked import masked_mean
from megarl.registry import Registry

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")

POLICY_LOSSES: Registry = Registry("policy loss")
register_policy_loss = POLICY_LOSSES.register


def token_weights(
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    batch_num_tokens: torch.Tensor | float | None = None,
    global_batch_size: torch.Tensor | float | None = None,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Per-token weights w of the training loop's loss Σ w · loss: `agg_loss`'s modes (without dp_size), except
    that seq-mean-token-sum-norm is also divided by the sequence count G. Being per token, they survive packing
    and context-parallel splitting: a micro-batch's loss is Σ w · loss over its own tokens."""
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; known: {', '.join(LOSS_AGG_MODES)}")
    mask = loss_mask.float()
    if loss_agg_mode == "token-mean":
        return mask / _at_least_one(mask.sum() if batch_num_tokens is None else batch_num_tokens)
    tokens_per_seq = mask.sum(dim=-1, keepdim=True)
    if global_batch_size is None:
        global_batch_size = (tokens_per_seq > 0).sum()
    weights = mask / _at_least_one(global_batch_size)
    if loss_agg_mode == "seq-mean-token-mean":
        weights = weights / (tokens_per_seq + 1e-8)
    elif loss_agg_mode == "seq-mean-token-sum-norm":
        weights = weights / (loss_scale_factor if loss_scale_factor is not None else loss_mask.shape[-1])
    return weights


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    dp_size: int = 1,
    batch_num_tokens: torch.Tensor | float | None = None,
    global_batch_size: torch.Tensor | float | None = None,
    loss_scale_factor: float | None = None,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Aggregate a [batch, response_length] loss matrix into a scalar, as verl's `agg_loss` does.

    With S_i = Σ_t loss·mask of sequence i, n_i its tokens, N = `batch_num_tokens` (default Σ n_i) and
    G = `global_batch_size` (default: the sequences with n_i > 0; fully masked rows are not sequences):
    token-mean: Σ S_i / N · dp_size. seq-mean-token-sum: Σ S_i / G · dp_size.
    seq-mean-token-mean: Σ (S_i / n_i) / G · dp_size. seq-mean-token-sum-norm (Dr.GRPO): Σ S_i / L, with
    L = `loss_scale_factor` (default: the padded response length; pass the configured max response length so
    micro-batches of different padding agree); as in verl, this mode ignores G and `dp_size`.
    Unlike verl, an empty batch (N or G of 0) gives 0, not NaN.
    `weights` (from `token_weights`, the training loop's path) replace the mode and counts: Σ weights·loss · dp_size.
    """
    if weights is None and loss_agg_mode == "seq-mean-token-sum-norm":
        scale = loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor
        return (loss_mat * loss_mask).sum() / scale
    if weights is None:
        weights = token_weights(loss_mask, loss_agg_mode, batch_num_tokens, global_batch_size, loss_scale_factor)
    return (loss_mat * weights).sum() * dp_size


def _at_least_one(count):
    # An empty (all-masked) batch has a zero loss, not 0/0.
    return count.clamp(min=1) if isinstance(count, torch.Tensor) else max(count, 1)


@register_policy_loss("vanilla")
def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_low: float = 0.2,
    cliprange_high: float = 0.2,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    **agg_kwargs,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate with clip-higher (asymmetric range) and dual-clip (arXiv:1912.09729).

    Returns (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower). For negative advantages the loss is bounded
    by −A·clip_ratio_c, so a huge ratio on a bad action cannot dominate the update.
    `agg_kwargs` (dp_size, batch_num_tokens, global_batch_size, loss_scale_factor, weights) go to `agg_loss`.
    """
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1.0 for dual-clip, got {clip_ratio_c}")
    negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    ppo_kl = masked_mean(-negative_approx_kl, response_mask)

    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_clipfrac = masked_mean(torch.gt(pg_losses2, pg_losses1).float(), response_mask)

    pg_losses3 = -advantages * clip_ratio_c
    clip_pg_losses2 = torch.minimum(pg_losses3, clip_pg_losses1)
    negative = advantages < 0
    pg_clipfrac_lower = masked_mean((torch.gt(clip_pg_losses1, pg_losses3) & negative).float(), response_mask)

    pg_losses = torch.where(negative, clip_pg_losses2, clip_pg_losses1)
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, **agg_kwargs)
    return pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    **agg_kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss: 0.5 · max((v − R)², (clip(v, v_old ± ε) − R)²). Returns (vf_loss, vf_clipfrac)."""
    vpred_clipped = torch.clamp(vpreds, values - cliprange_value, values + cliprange_value)
    vf_losses1 = (vpreds - returns) ** 2
    vf_losses2 = (vpred_clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(torch.maximum(vf_losses1, vf_losses2), response_mask, loss_agg_mode, **agg_kwargs)
    vf_clipfrac = masked_mean(torch.gt(vf_losses2, vf_losses1).float(), response_mask)
    return vf_loss, vf_clipfrac


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dimension: logsumexp(z) − Σ p·z."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)
