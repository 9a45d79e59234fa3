"""Faster stand-ins for megatron-core's pure-torch fallbacks, used when neither Apex nor Transformer Engine
provides the fused kernels.

megatron's fallback l2 norm (grad clipping, the grad-norm metric) builds `torch.tensor(list_of_norms)`
from per-parameter GPU scalars: one device→host synchronisation per parameter (~170 per step for a
0.5B model), which leaves the GPU idle between them. `_foreach_norm` computes the same norms with no
synchronisation. Nothing changes where Apex or TE supplies the kernel.
"""

from __future__ import annotations

import torch
from megatron.core import utils as megatron_utils
from megatron.core.optimizer import clip_grads


def multi_tensor_l2_norm(chunk_size, noop_flag, tensor_lists, per_tensor, *args):
    """Drop-in for megatron's `local_multi_tensor_l2_norm`: (total l2 norm as a float32 [1] tensor, None)."""
    norms = [norm for tensors in tensor_lists if tensors for norm in torch._foreach_norm(tensors)]
    if not norms:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return torch.zeros(1, dtype=torch.float, device=device), None
    return torch.linalg.vector_norm(torch.stack(norms).float()).reshape(1), None


def install() -> None:
    if clip_grads.l2_norm_impl is megatron_utils.local_multi_tensor_l2_norm:
        clip_grads.l2_norm_impl = multi_tensor_l2_norm
