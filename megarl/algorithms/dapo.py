"""DAPO's additions to GRPO (Yu et al. 2025; verl's recipe/dapo): dynamic sampling trains only on groups whose
responses differ in the filter metric (a group whose samples all score the same has zero advantage under GRPO and
so carries no policy gradient), and overlong shaping penalises responses that enter the last tokens before the
length limit."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch


def overlong_penalty(lengths: torch.Tensor, max_response_length: int, buffer_len: int,
                     penalty_factor: float) -> torch.Tensor:
    """Per response: 0 up to `max_response_length − buffer_len` tokens, then falling linearly to −`penalty_factor`
    at `max_response_length` (DAPO's soft overlong punishment)."""
    expected = max_response_length - buffer_len
    return torch.clamp(-(lengths.float() - expected) / buffer_len * penalty_factor, max=0.0)


def groups_with_signal(uids: Sequence[str], values: Sequence[float]) -> list[str]:
    """The uids, in order of first appearance, whose samples' values are not all equal; a group of one sample
    counts as having signal (verl's rule: std > 0 or a single sample)."""
    values = np.asarray(values, dtype=np.float64)
    uids = np.asarray(uids)
    order = list(dict.fromkeys(uids.tolist()))
    return [uid for uid in order if (group := values[uids == uid]).size == 1 or group.max() != group.min()]


def trained_group_count(kept: int, target: int, multiple: int) -> int:
    """How many groups a step trains on: `target` once `kept` groups with signal reach it; short of that, the kept
    groups rounded down to a whole `multiple` (a mini-batch), and never less than one `multiple`."""
    if kept >= target:
        return target
    return max(kept // multiple, 1) * multiple
