"""megatron-core parameters → HF tensors for the Llama family (Qwen2/2.5, Qwen3, Llama): one pure function.

It converts full tensors and tensor-parallel shards alike: megatron's shard of the fused QKV holds whole query
groups ([q heads, k, v] per group) and its shard of the fused gate/up holds [gate_r; up_r], so converting a
shard gives the HF tensors' shards. Each output names the dim along which the HF tensor is split over
tensor-parallel ranks (0: output rows, 1: input columns, None: every rank holds all of it), which is how the
reshard layer (parallel/reshard.py) gathers or slices it for a rollout engine's layout.

Names are megatron's with global layer numbers; the names on both sides come from `megarl.models.hf_names`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from megarl.models.hf_names import OUTPUT_LAYER, hf_names
from parallel.reshard import Part


@dataclass(frozen=True)
class AttentionShape:
    num_heads: int
    num_kv_heads: int
    head_dim: int

    @classmethod
    def of(cls, hf_config) -> AttentionShape:
        head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
        return cls(hf_config.num_attention_heads, hf_config.num_key_value_heads, head_dim)


def hf_converter(hf_config) -> Callable[[str, torch.Tensor], list[Part]]:
    """`megatron_to_hf` for the model of `hf_config` (its attention shape, whether its embeddings are tied)."""
    attention, tied = AttentionShape.of(hf_config), bool(getattr(hf_config, "tie_word_embeddings", False))
    return lambda name, tensor: megatron_to_hf(name, tensor, attention, tied)


def megatron_to_hf(name: str, tensor: torch.Tensor, attention: AttentionShape, tied: bool = False) -> list[Part]:
    """The HF tensors (or tensor-parallel shards of them) that megatron parameter `name` holds."""
    if tied and name == OUTPUT_LAYER:
        return []
    names, dim = hf_names(name)
    if len(names) == 1:
        return [(names[0], tensor, dim)]
    if ".linear_qkv." in name:
        parts = _split_qkv(tensor, attention)
    else:  # gate and up
        parts = tensor.chunk(len(names), dim=0)
    return [(hf_name, part, dim) for hf_name, part in zip(names, parts)]


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
