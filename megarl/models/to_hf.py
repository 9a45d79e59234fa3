"""megatron-core parameters → HF tensors for the Llama family (Qwen2/2.5, Qwen3, Llama): one pure function.

It converts full tensors and tensor-parallel shards alike: megatron's shard of the fused QKV holds whole query
groups ([q heads, k, v] per group) and its shard of the fused gate/up holds [gate_r; up_r], so converting a
shard gives the HF tensors' shards. Each output names the dim along which the HF tensor is split over
tensor-parallel ranks (0: output rows, 1: input columns, None: every rank holds all of it), which is how the
reshard layer (parallel/reshard.py) gathers or slices it for a rollout engine's layout.

Names are megatron's with global layer numbers; both the local spec's norm names and Transformer Engine's
(norms fused into the following linear layer) are understood.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

HFPart = tuple[str, torch.Tensor, "int | None"]  # (HF name, tensor, tensor-parallel dim)


@dataclass(frozen=True)
class AttentionShape:
    num_heads: int
    num_kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, hf_config) -> AttentionShape:
        head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
        return cls(hf_config.num_attention_heads, hf_config.num_key_value_heads, head_dim)


_LAYER = re.compile(r"decoder\.layers\.(\d+)\.(.+)")

_LAYER_NAMES = {
    "input_layernorm.weight": ("input_layernorm.weight", None),
    "self_attention.linear_qkv.layer_norm_weight": ("input_layernorm.weight", None),
    "pre_mlp_layernorm.weight": ("post_attention_layernorm.weight", None),
    "mlp.linear_fc1.layer_norm_weight": ("post_attention_layernorm.weight", None),
    "self_attention.linear_proj.weight": ("self_attn.o_proj.weight", 1),
    "self_attention.q_layernorm.weight": ("self_attn.q_norm.weight", None),
    "self_attention.k_layernorm.weight": ("self_attn.k_norm.weight", None),
    "mlp.linear_fc2.weight": ("mlp.down_proj.weight", 1),
}


def megatron_to_hf(name: str, tensor: torch.Tensor, attention: AttentionShape, tied: bool = False) -> list[HFPart]:
    """The HF tensors (or tensor-parallel shards of them) that megatron parameter `name` holds."""
    if name == "embedding.word_embeddings.weight":
        return [("model.embed_tokens.weight", tensor, 0)]
    if name == "output_layer.weight":
        return [] if tied else [("lm_head.weight", tensor, 0)]
    if name == "decoder.final_layernorm.weight":
        return [("model.norm.weight", tensor, None)]
    match = _LAYER.fullmatch(name)
    if match is None:
        raise KeyError(f"no HF name for megatron parameter {name}")
    layer, rest = match.groups()
    prefix = f"model.layers.{layer}."
    if rest in _LAYER_NAMES:
        hf_name, dim = _LAYER_NAMES[rest]
        return [(prefix + hf_name, tensor, dim)]
    if rest in ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias"):
        kind = rest.rsplit(".", 1)[1]
        q, k, v = _split_qkv(tensor, attention)
        return [(f"{prefix}self_attn.{p}_proj.{kind}", t, 0) for p, t in zip("qkv", (q, k, v))]
    if rest == "mlp.linear_fc1.weight":
        gate, up = tensor.chunk(2, dim=0)
        return [(prefix + "mlp.gate_proj.weight", gate, 0), (prefix + "mlp.up_proj.weight", up, 0)]
    raise KeyError(f"no HF name for megatron parameter {name}")


def _split_qkv(tensor: torch.Tensor, attention: AttentionShape):
    per_group = attention.num_heads // attention.num_kv_heads
    rows = (per_group + 2) * attention.head_dim
    groups = tensor.shape[0] // rows
    grouped = tensor.reshape(groups, per_group + 2, attention.head_dim, *tensor.shape[1:])
    trailing = tensor.shape[1:]
    q = grouped[:, :per_group].reshape(groups * per_group * attention.head_dim, *trailing)
    k = grouped[:, per_group].reshape(groups * attention.head_dim, *trailing)
    v = grouped[:, per_group + 1].reshape(groups * attention.head_dim, *trailing)
    return q, k, v
