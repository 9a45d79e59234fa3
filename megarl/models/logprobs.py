"""Per-token log-probabilities and entropy from tensor-parallel (vocab-sharded) logits.

The full-vocabulary logits are never gathered: each TP rank reduces its shard, and only per-token scalars
cross ranks. As everywhere in megatron, the result is replicated on every TP rank, so each rank's backward
is the gradient of that replicated value with respect to its own shard and needs no communication.

One autograd function computes both, keeping a single fp32 softmax for backward and using the analytic
gradients d log p(y)/dz = onehot(y) − p and dH/dz = −p·(log p + H): the vocabulary-sized temporaries
dominate this step's memory traffic, so it matters how many of them exist.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from megatron.core import parallel_state


def _tp_group():
    if not parallel_state.model_parallel_is_initialized():
        return None
    group = parallel_state.get_tensor_model_parallel_group()
    return group if dist.get_world_size(group) > 1 else None


def _all_reduce(tensor: torch.Tensor, group, op=dist.ReduceOp.SUM) -> torch.Tensor:
    if group is not None:
        dist.all_reduce(tensor, op=op, group=group)
    return tensor


class _LogProbEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, with_entropy: bool, group):
        shard = logits.shape[-1]
        start = dist.get_rank(group) * shard if group is not None else 0
        logits_max = _all_reduce(logits.max(dim=-1).values.float(), group, dist.ReduceOp.MAX)
        probs = logits.float() - logits_max.unsqueeze(-1)  # a fresh fp32 tensor, reused in place below
        in_shard = (labels >= start) & (labels < start + shard)
        local_index = (labels - start).clamp(0, shard - 1)
        target = _all_reduce(probs.gather(-1, local_index.unsqueeze(-1)).squeeze(-1) * in_shard, group)
        probs.exp_()
        sum_exp = _all_reduce(probs.sum(dim=-1), group)
        logprobs = target - sum_exp.log()
        probs.div_(sum_exp.unsqueeze(-1))
        entropy = None
        if with_entropy:
            entropy = -_all_reduce(torch.special.xlogy(probs, probs).sum(dim=-1), group)
        ctx.with_entropy = with_entropy
        ctx.input_dtype = logits.dtype
        ctx.save_for_backward(probs, local_index, in_shard, entropy if with_entropy else logprobs)
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropy):
        probs, local_index, in_shard, entropy = ctx.saved_tensors
        grad = torch.zeros_like(probs)
        if grad_logprobs is not None:
            grad.sub_(probs * grad_logprobs.unsqueeze(-1))
            grad.scatter_add_(-1, local_index.unsqueeze(-1), (grad_logprobs * in_shard).unsqueeze(-1))
        if ctx.with_entropy and grad_entropy is not None:
            grad.sub_((torch.special.xlogy(probs, probs) + probs * entropy.unsqueeze(-1)) * grad_entropy.unsqueeze(-1))
        return grad.to(ctx.input_dtype), None, None, None


def vocab_parallel_logprobs_and_entropy(
    logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0, with_entropy: bool = True
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits [..., V/tp] (this rank's vocab shard), labels [...] (global token ids) → log p(label) and the
    entropy of the distribution, both [...] in float32, differentiable through `logits`."""
    if temperature != 1.0:
        logits = logits / temperature
    return _LogProbEntropy.apply(logits, labels, with_entropy, _tp_group())
