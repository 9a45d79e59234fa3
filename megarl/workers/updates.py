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
from megarl.models.packing import PackedBatch, pack_sequences, token_budget_micro_batches
from megarl.rollout.batch import sequences
from parallel.batch import Batch


def micro_batches(lengths: list[int], dynamic: bool, per_gpu: int, max_tokens: int) -> list[list[int]]:
    """Sample indices per micro-batch: by token budget (`use_dynamic_bsz`) or `per_gpu` samples at a time."""
    if dynamic:
        return token_budget_micro_batches(lengths, max_tokens)
    return [list(range(i, min(i + per_gpu, len(lengths)))) for i in range(0, len(lengths), per_gpu)]


def at_next_token_positions(batch: Batch, values: torch.Tensor) -> list[torch.Tensor]:
    """[B, R] response values → per sample, a tensor over next-token positions (length L − 1, position t about
    token t + 1), as `pack_sequences` takes token fields; zero on the prompt."""
    lengths = batch["response_mask"].sum(dim=1).long().tolist()
    out = []
    for prompt, row, length in zip(batch["prompt_ids"], values, lengths):
        field = torch.zeros(len(prompt) + length - 1, dtype=torch.float32)
        field[len(prompt) - 1 :] = row[:length].float()
        out.append(field)
    return out


def pack_mini_batch(part: Batch, fields: dict[str, torch.Tensor], loss_agg_mode: str, max_response_length: int,
                    section, device) -> tuple[list[PackedBatch], float]:
    """Micro-batches of `part` packed for this context-parallel rank, with token fields `fields` ([B, R] each),
    `mask`, `weights` (under `loss_agg_mode`) and `token_mean` (for metrics); and the mini-batch's global
    response-token count. `section` gives the micro-batch sizes (actor or critic config)."""
    mask = part["response_mask"]
    counts = torch.stack([mask.sum(), (mask.sum(-1) > 0).sum().float()]).to(device)
    dist.all_reduce(counts, group=parallel_state.get_data_parallel_group())
    tokens, sequence_count = counts.tolist()
    fields = {
        **fields, "mask": mask,
        "weights": token_weights(mask, loss_agg_mode, tokens, sequence_count, max_response_length),
        "token_mean": token_weights(mask, "token-mean", tokens),
    }
    seqs = sequences(part)
    groups = micro_batches([len(s) for s in seqs], section.use_dynamic_bsz, section.ppo_micro_batch_size_per_gpu,
                           section.ppo_max_token_len_per_gpu)
    return pack_groups(part, seqs, fields, groups, device), tokens


def pack_groups(part: Batch, seqs: list[torch.Tensor], fields: dict[str, torch.Tensor], groups: list[list[int]],
                device) -> list[PackedBatch]:
    """`part`'s sequences `seqs`, one packed batch per group of indices for this context-parallel rank, with
    the response `fields` ([B, R] each) as token fields."""
    per_token = {name: at_next_token_positions(part, values) for name, values in fields.items()}
    cp_size, cp_rank = parallel_state.get_context_parallel_world_size(), parallel_state.get_context_parallel_rank()
    return [pack_sequences([seqs[i] for i in group], cp_size, cp_rank, device,
                           {name: [values[i] for i in group] for name, values in per_token.items()})
            for group in groups]


def reduce_metrics(step: dict[str, float], device) -> dict[str, float]:
    """A `train_step` result → the loss metrics summed over data and context parallel ranks (they live on the
    last pipeline stage), with grad_norm and lr."""
    summed = {k: v for k, v in step.items() if k not in ("grad_norm", "lr", "update_successful")}
    if parallel_state.is_pipeline_last_stage(ignore_virtual=True):
        values = torch.tensor([summed[k] for k in sorted(summed)], dtype=torch.float64, device=device)
        dist.all_reduce(values, group=parallel_state.get_data_parallel_group(with_context_parallel=True))
        summed = dict(zip(sorted(summed), values.tolist()))
    return {**summed, "grad_norm": step["grad_norm"], "lr": step["lr"]}


def ppo_epochs(batch: Batch, section, samples_per_prompt: int, update: Callable[[Batch], dict[str, float]],
               prefix: str) -> dict[str, float]:
    """`update` on each mini-batch of this rank's part (`section.ppo_mini_batch_size` prompts × their samples
    across all data-parallel ranks), `section.ppo_epochs` times; metrics averaged over the optimizer steps and
    named `prefix/…`."""
    dp_size = parallel_state.get_data_parallel_world_size()
    per_rank = section.ppo_mini_batch_size * samples_per_prompt // dp_size
    totals: dict[str, float] = {}
    steps = 0
    for _ in range(section.ppo_epochs):
        for start in range(0, len(batch), per_rank):
            for key, value in update(batch.select(indices=slice(start, start + per_rank))).items():
                totals[key] = totals.get(key, 0.0) + value
            steps += 1
    return {f"{prefix}/{key}": value / steps for key, value in totals.items()}
