"""What megatron-core needs where neither Apex nor Transformer Engine provides its fused kernels.

megatron's fallback l2 norm (grad clipping, the grad-norm metric) builds `torch.tensor(list_of_norms)`
from per-parameter GPU scalars: one device→host synchronisation per parameter (docs/benchmarks.md counts them),
which leaves the GPU idle between them. `_foreach_norm` computes the same norms with no
synchronisation. megatron's MoE router reads `te_general_gemm`, which its module defines only when TE imports: it
is defined as None there, which the router's code takes for "no TE" (its plain matmul). Nothing changes where Apex
or TE supplies the kernels.
"""

from __future__ import annotations

import torch

from parallel import seams


def multi_tensor_l2_norm(chunk_size, noop_flag, tensor_lists, per_tensor, *args):
    """Drop-in for megatron's `local_multi_tensor_l2_norm`: (total l2 norm as a float32 [1] tensor, None)."""
    norms = [norm for tensors in tensor_lists if tensors for norm in torch._foreach_norm(tensors)]
    if not norms:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return torch.zeros(1, dtype=torch.float, device=device), None
    return torch.linalg.vector_norm(torch.stack(norms).float()).reshape(1), None


def install() -> None:
    """Where megatron fell back to its pure-torch l2 norm (parallel/seams.py: `FALLBACKS`), this one instead; where
    its MoE router would read an undefined name, None."""
    if seams.L2_NORM_IMPL.current() is seams.L2_NORM_FALLBACK.current():
        seams.L2_NORM_IMPL.replace(multi_tensor_l2_norm)
    if seams.MOE_TE_GEMM.missing():
        seams.MOE_TE_GEMM.replace(None)
