"""Masked reductions over [batch, response_length] tensors."""

from __future__ import annotations

import torch


def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    masked = values * mask
    return masked.sum() if axis is None else masked.sum(axis)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Mean over positions where mask is 1; 0 (not NaN) where the mask is empty."""
    count = mask.sum() if axis is None else mask.sum(axis)
    return masked_sum(values, mask, axis) / (count + 1e-8)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance over masked positions.

    verl raises when fewer than two positions are unmasked; here the Bessel correction is simply skipped
    then (variance 0 for one position), so a batch of empty responses cannot crash a run or yield NaN.
    """
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    count = mask.sum()
    if unbiased and count > 1:
        variance = variance * count / (count - 1)
    return variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """`values` shifted to mean 0 and scaled to variance 1 over the masked positions, in `values`' dtype. The
    statistics are float64's: the square of a float32 value above ~1.8e19 overflows float32, and an infinite
    variance would whiten every value to 0 (or NaN)."""
    wide = values.double()
    mean, var = masked_mean(wide, mask), masked_var(wide, mask)
    whitened = (wide - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened.to(values.dtype)
