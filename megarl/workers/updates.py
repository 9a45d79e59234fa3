"""What the actor's, the critic's and the SFT updates share: micro-batches, mini-batch packing with per-token loss
weights, the epoch/mini-batch loop, and metric reduction.

Updates run on packed sequences split over context-parallel ranks, so every loss is a per-token weighted sum:
`token_weights` gives each response token its weight under the loss-aggregation mode from the mini-batch's
global token and sequence counts (summed over data-parallel ranks), and a micro-batch's loss is Σ weight × loss
over its own tokens. Metrics are sums of such contributions, all-reduced over data and context parallel ranks.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist
from megatron.core import parallel_state

from megarl.algorithms import token_weights
from megarl.columns import RESPONSE_MASK
from megarl.models.packing import PackedBatch, pack_micro_batches
from megarl.workers.sequences import at_next_token_positions, sequences
from megarl.workers.inputs import UpdateSchedule
from parallel.batch import Batch


def loss_fields(part: Batch, fields: dict[str, torch.Tensor], update: UpdateSchedule, device,
                mask: torch.Tensor | None = None) -> tuple[dict[str, torch.Tensor], float]:
    """The token fields of `part`'s update ([B, R] each): `fields`, `mask` (the response mask, or the given one:
    fewer tokens in the loss), `weights` (under the update's loss-aggregation mode) and `token_mean` (for metrics);
    and the mini-batch's global count of loss tokens (a collective over the data-parallel group)."""
    mask = part[RESPONSE_MASK] if mask is None else mask
    counts = torch.stack([mask.sum(), (mask.sum(-1) > 0).sum().float()]).to(device)
    dist.all_reduce(counts, group=parallel_state.get_data_parallel_group())
    tokens, sequence_count = counts.tolist()
    return {
        **fields, "mask": mask,
        "weights": token_weights(mask, update.loss_agg_mode, tokens, sequence_count, update.loss_scale_factor),
        "token_mean": token_weights(mask, "token-mean", tokens),
    }, tokens


def pack_mini_batch(part: Batch, fields: dict[str, torch.Tensor], update: UpdateSchedule, device,
                    one_length: bool = False) -> tuple[list[PackedBatch], float]:
    """Micro-batches of `part` packed for this context-parallel rank with `loss_fields`, and the mini-batch's global
    count of loss tokens. `one_length`: the role's `RoleModel.packs_to_one_length`."""
    fields, tokens = loss_fields(part, fields, update, device)
    seqs = sequences(part)
    return pack_groups(part, seqs, fields, update.micro.split([len(s) for s in seqs]), device,
                       one_length=one_length), tokens


def pack_groups(part: Batch, seqs: list[torch.Tensor], fields: dict[str, torch.Tensor], groups: list[list[int]],
                device, routing: list[torch.Tensor] | None = None, one_length: bool = False,
                min_tokens: int = 0) -> list[PackedBatch]:
    """`part`'s sequences `seqs`, one packed batch per group of indices for this context-parallel rank, with
    the response `fields` ([B, R] each) as token fields, `routing` to replay (R3); `one_length` (the role's
    `RoleModel.packs_to_one_length`): each batch then of as many tokens, at least `min_tokens`."""
    per_token = {name: at_next_token_positions(part, values) for name, values in fields.items()}
    return pack_micro_batches(seqs, groups, device, per_token, routing, one_length, min_tokens)


def reduce_metrics(step: dict) -> dict[str, float]:
    """A `train_step` result → the loss metrics summed over data and context parallel ranks (they live on the
    last pipeline stage), with grad_norm and lr; the metrics come to the host in one copy."""
    keys = sorted(k for k in step if k not in ("grad_norm", "lr", "update_successful"))
    summed = {}
    if keys and parallel_state.is_pipeline_last_stage(ignore_virtual=True):
        values = torch.stack([step[k] for k in keys])
        dist.all_reduce(values, group=parallel_state.get_data_parallel_group(with_context_parallel=True))
        summed = dict(zip(keys, values.tolist()))
    return {**summed, "grad_norm": step["grad_norm"], "lr": step["lr"]}


def ppo_epochs(batch: Batch, schedule: UpdateSchedule, update: Callable[[Batch], dict[str, float]],
               prefix: str) -> dict[str, float]:
    """`update` on each mini-batch of this rank's part, epoch after epoch as `schedule` says; metrics averaged
    over the optimizer steps and named `prefix/…`."""
    per_rank = schedule.mini_batch_samples // parallel_state.get_data_parallel_world_size()
    totals: dict[str, float] = {}
    steps = 0
    for _ in range(schedule.epochs):
        for start in range(0, len(batch), per_rank):
            for key, value in update(batch.select(indices=slice(start, start + per_rank))).items():
                totals[key] = totals.get(key, 0.0) + value
            steps += 1
    return {f"{prefix}/{key}": value / steps for key, value in totals.items()}
