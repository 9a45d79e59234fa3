"""The query/key RMSNorm (Qwen3's `qk_layernorm`) for megatron-core's local layer spec: it hands RoPE a float32
tensor.

megatron applies RoPE right after these norms. On a bf16 tensor its local (unfused) RoPE multiplies by cos and sin
rounded to bf16 and rounds both products and their sum; on float32 it rotates in float32, and SDPAttention rounds
the rotated query and key to the model's dtype once, as SGLang's fused RoPE kernel does. The norm still runs and
saves its input in the model's dtype, so the activations kept for the backward are the same size, except under
`selective` recomputation, whose checkpoint of core attention keeps the float32 query and key; RoPE's temporaries
are float32, twice their bf16 size, while one layer's attention runs. On Qwen3-8B's shape this took the trainer's
log-prob error against float32 from 1.0313 to 1.0296 (12 layers) and its distance to SGLang's from 1.0322 to
1.0288 (benchmarks/logprob_layers.py, docs/rollout.md).
"""

from __future__ import annotations

import torch

from megarl.models.accelerators import CompiledOnGPU


class QKNormFloat32Out(torch.nn.RMSNorm):
    """Drop-in for the local spec's `q_layernorm` / `k_layernorm` (megatron's `WrappedTorchNorm` arguments)."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-5, **_unused):
        if config.normalization != "RMSNorm":
            raise ValueError(f"query/key norms are RMSNorm in the models megarl runs, not {config.normalization}")
        super().__init__(hidden_size, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _norm(x, self.weight, self.eps)


def _rms_norm_float32(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps).float()


# On a GPU one kernel where eagerly torch's RMSNorm (slow on rows of one head, 128 values) and the float32 copy are
# two (docs/benchmarks.md has the time).
_norm = CompiledOnGPU(_rms_norm_float32)
