"""Rotary position embedding for packed sequences on the local spec, applied by SDPAttention from per-token tables made
once per micro-batch.

megatron's unfused THD RoPE, in every layer and for the query and the key each, splits the packed tensor by sequence
in Python, slices and concatenates the frequencies sequence by sequence, and takes their cos and sin: a few hundred
Python operations and a dozen kernels. At 0.5B the training passes wait on the host, and this was a quarter of its
time in them. Here `SelfAttentionRotaryInCore` (swapped in through the layer spec) hands megatron's frequencies to the
core attention with the packed parameters instead of rotating; the first layer gathers them at each token's position
(`LocalPackedSeqParams.positions_device`, made while packing), and its float32 cos and sin tables serve every layer
of the micro-batch. The arithmetic is megatron's (t·cos + rotate_half(t)·sin) in float32, rounded once to the
attention's dtype, as SGLang's RoPE kernel does: bit-identical to megatron where the query and key reach it in float32
(QKNormFloat32Out, or a float32 model), and one rounding instead of four where they are bf16. On a GPU it is one
torch.compile'd kernel.

Only plain RoPE moves (not interleaved, no YaRN scaling of the magnitude, no multi-latent attention); otherwise, and
for unpacked input, megatron rotates as before.
"""

from __future__ import annotations

import torch
from megatron.core.transformer.attention import SelfAttention

from megarl.models.accelerators import CompiledOnGPU
from megarl.models.packing import LocalPackedSeqParams


def _plain_rope(config) -> bool:
    return (not config.rotary_interleaved and not config.multi_latent_attention and not config.apply_rope_fusion
            and not hasattr(config, "yarn_rotary_scaling_factor"))


class SelfAttentionRotaryInCore(SelfAttention):
    """megatron's SelfAttention; with packed sequences (LocalPackedSeqParams) its core attention applies RoPE."""

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        self.rotary_in_core = _plain_rope(config)

    def forward(self, hidden_states, attention_mask, *args, rotary_pos_emb=None, packed_seq_params=None, **kwargs):
        if not (self.rotary_in_core and isinstance(rotary_pos_emb, torch.Tensor)
                and isinstance(packed_seq_params, LocalPackedSeqParams)):
            return super().forward(hidden_states, attention_mask, *args, rotary_pos_emb=rotary_pos_emb,
                                   packed_seq_params=packed_seq_params, **kwargs)
        # Lent to the micro-batch's own parameters for this call, not set on a copy: copying the dataclass reads
        # every field, and a compiled layer (megarl/models/compiled_layer.py) would be specialised, and recompiled,
        # on the number of packed sequences.
        packed_seq_params.rotary_freqs = rotary_pos_emb
        try:
            return super().forward(hidden_states, attention_mask, *args, rotary_pos_emb=None,
                                   packed_seq_params=packed_seq_params, **kwargs)
        finally:
            packed_seq_params.rotary_freqs = None


def rotate_packed(t: torch.Tensor, params: LocalPackedSeqParams, dtype: torch.dtype) -> torch.Tensor:
    """`t` [tokens, heads, head_dim] rotated at each token's position by `params.rotary_freqs` ([max_len, 1, 1, rot]),
    in `dtype`."""
    cos, sin = _tables(params)
    return _rotate(t, cos, sin, dtype)


def _rotate_float32(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t·cos + rotate_half(t)·sin over the first `rot` channels, in float32, rounded once to `dtype`."""
    rot = cos.shape[-1]
    head = t[..., :rot].float()
    first, second = head.chunk(2, dim=-1)
    rotated = head * cos + torch.cat((-second, first), dim=-1) * sin
    return (rotated if rot == t.shape[-1] else torch.cat((rotated, t[..., rot:].float()), dim=-1)).to(dtype)


# On a GPU one kernel per query or key where eagerly the float32 products, the half-rotation's copies and the final
# rounding each stream the tensor through memory (in a 0.6B forward pass's profile, about a third of the non-GEMM
# kernel time).
_rotate = CompiledOnGPU(_rotate_float32)


def _tables(params: LocalPackedSeqParams) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [tokens, 1, rot] in float32, made by the micro-batch's first layer (the tables are shared by every
    copy of its parameters; a new frequency tensor, from another model, makes them afresh)."""
    freqs = params.rotary_freqs
    cached = params.rotary_tables.get("cos_sin")
    if cached is None or cached[0] is not freqs:
        angles = freqs.squeeze(1)[params.positions_device].float()  # [tokens, 1, rot]
        cached = (freqs, torch.cos(angles), torch.sin(angles))
        params.rotary_tables["cos_sin"] = cached
    return cached[1], cached[2]
