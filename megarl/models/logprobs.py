"""Per-token log-probabilities and entropy from tensor-parallel (vocab-sharded) logits.

The full-vocabulary logits are never gathered: each TP rank reduces its shard, and only per-token scalars
cross ranks. As everywhere in megatron, the result is computed identically on every TP rank, so the
cross-rank sums use megatron's reduce mapping (all-reduce forward, identity backward).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region


def _tp_world() -> tuple[int, int]:
    if not parallel_state.model_parallel_is_initialized():
        return 1, 0
    return parallel_state.get_tensor_model_parallel_world_size(), parallel_state.get_tensor_model_parallel_rank()


def vocab_parallel_logprobs_and_entropy(
    logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0, with_entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits [..., V/tp] (this rank's vocab shard), labels [...] (global token ids) → log p(label) and the
    entropy of the distribution, both [...], in float32, differentiable through `logits`."""
    tp_size, tp_rank = _tp_world()
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    shard = logits.shape[-1]
    local_max = logits.max(dim=-1).values.detach()
    if tp_size > 1:
        dist.all_reduce(local_max, op=dist.ReduceOp.MAX, group=parallel_state.get_tensor_model_parallel_group())
    shifted = logits - local_max.unsqueeze(-1)
    exp = shifted.exp()
    sum_exp = exp.sum(dim=-1)
    start = tp_rank * shard
    in_shard = (labels >= start) & (labels < start + shard)
    local_index = (labels - start).clamp(0, shard - 1)
    target = shifted.gather(-1, local_index.unsqueeze(-1)).squeeze(-1) * in_shard
    weighted = (exp * shifted).sum(dim=-1) if with_entropy else None
    if tp_size > 1:
        sum_exp = reduce_from_tensor_model_parallel_region(sum_exp)
        target = reduce_from_tensor_model_parallel_region(target)
        if with_entropy:
            weighted = reduce_from_tensor_model_parallel_region(weighted)
    log_sum_exp = sum_exp.log()
    logprobs = target - log_sum_exp
    entropy = log_sum_exp - weighted / sum_exp if with_entropy else None
    return logprobs, entropy
