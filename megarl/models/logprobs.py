"""Per-token log-probabilities and entropy from tensor-parallel (vocab-sharded) logits.

The full-vocabulary logits are never gathered: each TP rank reduces its shard, and only per-token scalars
cross ranks. As everywhere in megatron, the result is replicated on every TP rank, so each rank's backward
is the gradient of that replicated value with respect to its own shard and needs no communication.

Why chunked: with a large vocabulary the [tokens × vocab] temporaries dominate activation memory (12288
tokens × 151936 vocab in fp32 is 7.5 GB each), so this function never materialises one. The forward walks
over token chunks and keeps only per-token scalars (max, log Σexp, entropy); the backward recomputes the
softmax chunk by chunk from the saved input logits, using the analytic gradients d log p(y)/dz =
onehot(y) − p and dH/dz = −p·(log p + H). Op by op (on CPU), every fp32 temporary is bounded by `CHUNK_BYTES`,
whatever the token count. Not bounded, because they are not this function's: the model's own logits [T, V/tp] in
the input dtype (kept alive by the caller anyway, and saved here instead of a softmax) and their gradient, which
backward allocates once in the input dtype and fills chunk by chunk.

Fused (torch.compile'd, a GPU's default), each pass is one kernel over all the tokens that keeps its fp32 values in
registers: the forward's sums are reductions, and the backward's gradient is elementwise (the one-hot term compares
column indices with the label instead of scattering into an fp32 buffer), written in the input dtype as the gradient
itself. With no temporary to bound, it takes no chunks: small chunks cost the host a compiled call each, and the
0.5B passes wait on the host.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from megatron.core import parallel_state

from megarl.models.accelerators import CompiledOnGPU

# Budget for one fp32 [tokens × V/tp] chunk temporary; a few of them are alive at once.
CHUNK_BYTES = 256 * 2**20


def _tp_group():
    if not parallel_state.model_parallel_is_initialized():
        return None
    group = parallel_state.get_tensor_model_parallel_group()
    return group if dist.get_world_size(group) > 1 else None


def _all_reduce(tensor: torch.Tensor, group, op=dist.ReduceOp.SUM) -> torch.Tensor:
    if group is not None:
        dist.all_reduce(tensor, op=op, group=group)
    return tensor


def _shifted(logits: torch.Tensor, logits_max: torch.Tensor, temperature: float) -> torch.Tensor:
    """z = logits/T − max in fp32, always a fresh tensor (even for fp32 input) so callers may work in place."""
    z = logits.to(torch.float32, copy=True).div_(temperature)
    return z.sub_(logits_max.unsqueeze(-1))


def _chunks(tokens: int, chunk_tokens: int):
    return ((start, min(start + chunk_tokens, tokens)) for start in range(0, tokens, chunk_tokens))


class _LogProbEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, labels, temperature: float, with_entropy: bool, group, chunk_tokens: int, fused: bool):
        shard = logits.shape[-1]
        flat, flat_labels = logits.reshape(-1, shard), labels.reshape(-1)
        start = dist.get_rank(group) * shard if group is not None else 0
        in_shard = (flat_labels >= start) & (flat_labels < start + shard)
        local_index = (flat_labels - start).clamp(0, shard - 1)
        # The max of the input dtype is exact, so no fp32 copy of the shard is needed to find it.
        logits_max = _all_reduce(flat.max(dim=-1).values.float(), group, dist.ReduceOp.MAX).div_(temperature)
        # Rows: Σ e^z, z(label) where this rank holds it (0 elsewhere, so the SUM picks the owner's), Σ e^z·z.
        sums = torch.empty(3 if with_entropy else 2, flat.shape[0], dtype=torch.float32, device=logits.device)
        target = _shifted(flat.gather(-1, local_index.unsqueeze(-1)), logits_max, temperature).squeeze(-1)
        torch.mul(target, in_shard, out=sums[1])
        chunk_sums = _CHUNK_SUMS.compiled if fused else _CHUNK_SUMS.eager
        for begin, end in _chunks(flat.shape[0], chunk_tokens):
            sum_e, sum_ez = chunk_sums(flat[begin:end], logits_max[begin:end], temperature, with_entropy)
            sums[0, begin:end] = sum_e
            if with_entropy:
                sums[2, begin:end] = sum_ez
        _all_reduce(sums, group)
        log_sum_exp = sums[0].log()
        logprobs = sums[1] - log_sum_exp
        entropy = log_sum_exp - sums[2] / sums[0] if with_entropy else None
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None, and its term is skipped
        ctx.temperature, ctx.chunk_tokens, ctx.fused = temperature, chunk_tokens, fused
        saved = (entropy,) if with_entropy else ()
        ctx.save_for_backward(logits, local_index, in_shard, logits_max, log_sum_exp, *saved)
        shape = labels.shape
        return logprobs.view(shape), (entropy.view(shape) if with_entropy else None)

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropy):
        logits, local_index, in_shard, logits_max, log_sum_exp, *saved = ctx.saved_tensors
        entropy = saved[0] if saved else None
        if grad_logprobs is None and grad_entropy is None:
            return (None,) * 7
        flat = logits.reshape(-1, logits.shape[-1])
        # d/dlogits = (d/dz)/T: folding 1/T into the per-token factors saves an elementwise op per chunk.
        g_lp, g_h = (g.reshape(-1).float() / ctx.temperature if g is not None else None
                     for g in (grad_logprobs, grad_entropy))
        chunk_grad = _CHUNK_GRAD.compiled if ctx.fused else _CHUNK_GRAD.eager
        per_token = (logits_max, log_sum_exp, local_index, in_shard, entropy, g_lp, g_h)
        chunks = list(_chunks(flat.shape[0], ctx.chunk_tokens))
        if len(chunks) == 1:  # the gradient is the kernel's output: no buffer to copy it into
            grad = chunk_grad(flat, ctx.temperature, *per_token)
        else:
            grad = torch.empty_like(flat)
            for begin, end in chunks:
                rows = slice(begin, end)
                grad[rows] = chunk_grad(flat[rows], ctx.temperature, *(
                    t[rows] if t is not None else None for t in per_token))
        return grad.view(logits.shape), None, None, None, None, None, None


def _chunk_sums(chunk, chunk_max, temperature: float, with_entropy: bool):
    """Per token of one chunk, over this rank's vocab shard: Σ e^z and (with entropy) Σ e^z·z,
    z = logits/T − max."""
    z = _shifted(chunk, chunk_max, temperature)
    e = z.exp()
    return e.sum(dim=-1), (e.mul_(z).sum(dim=-1) if with_entropy else None)


def _chunk_grad(chunk, temperature: float, chunk_max, log_sum_exp, local_index, in_shard, entropy, g_lp, g_h):
    """One chunk's gradient with respect to its logits, in their dtype."""
    log_p = _shifted(chunk, chunk_max, temperature).sub_(log_sum_exp.unsqueeze(-1))
    return _grad_z(log_p, local_index, in_shard, entropy, g_lp, g_h).to(chunk.dtype)


# Compiled, each chunk's arithmetic is one kernel that reads the logits once, where eagerly every elementwise op
# streams an fp32 [tokens × V/tp] temporary through memory (its share of a forward pass: docs/benchmarks.md).
_CHUNK_SUMS, _CHUNK_GRAD = CompiledOnGPU(_chunk_sums), CompiledOnGPU(_chunk_grad)


def _grad_z(log_p, local_index, in_shard, entropy, g_lp, g_h) -> torch.Tensor:
    """g_lp·(onehot − p) − g_h·p·(log p + H) for one chunk, built in log_p's buffer and one more for p. The
    one-hot term is a comparison, not a scatter, so that compiled the whole gradient is one elementwise kernel."""
    p = log_p.exp()
    if g_h is None:
        grad = p.mul_(-g_lp.unsqueeze(-1))
    else:
        grad = log_p.add_(entropy.unsqueeze(-1)).mul_(p).mul_(-g_h.unsqueeze(-1))
        if g_lp is not None:
            grad.sub_(p.mul_(g_lp.unsqueeze(-1)))
    if g_lp is not None:
        columns = torch.arange(grad.shape[-1], device=grad.device)
        grad.add_((columns == local_index.unsqueeze(-1)) * (g_lp * in_shard).unsqueeze(-1))
    return grad


def vocab_parallel_logprobs_and_entropy(
    logits: torch.Tensor, labels: torch.Tensor, temperature: float = 1.0, with_entropy: bool = True,
    *, chunk_tokens: int | None = None, fused: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits [..., V/tp] (this rank's vocab shard), labels [...] (global token ids) → log p(label) and the
    entropy of the distribution at `temperature`, both [...] in float32, differentiable through `logits`.
    `fused` (default: on a GPU) runs the arithmetic as torch.compile'd kernels rather than op by op. `chunk_tokens`
    overrides how many tokens one pass covers (default: `CHUNK_BYTES` of fp32 op by op; every token fused)."""
    fused = logits.is_cuda if fused is None else fused
    if chunk_tokens is None:
        chunk_tokens = logits.numel() // logits.shape[-1] if fused else CHUNK_BYTES // (4 * logits.shape[-1])
    chunk_tokens = max(1, chunk_tokens)
    return _LogProbEntropy.apply(logits, labels, float(temperature), with_entropy, _tp_group(), chunk_tokens, fused)
