"""The one table of megatron-core ↔ HF parameter names for the Llama family (Qwen2/2.5, Qwen3, Llama).

Both directions read it: the bridge (`megarl.models.bridge`) maps each megatron parameter to the HF tensors it
loads from and exports to, and `megarl.models.to_hf.megatron_to_hf` converts parameters for a rollout engine.
The layer norms have two spellings: the local spec's own norm modules, and Transformer Engine's, which fuses
each norm into the linear layer after it.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class HFNames(NamedTuple):
    names: tuple[str, ...]  # a fused megatron tensor holds these in order: q, k, v per query group; gate, up
    tp_dim: int | None  # the dim of the HF tensors that tensor parallelism splits; None: every rank has it all


EMBEDDING = "model.embed_tokens.weight"
LM_HEAD = "lm_head.weight"
VALUE_HEAD_NAME = "score.weight"  # as in HF's AutoModelForTokenClassification(num_labels=1)
OUTPUT_LAYER = "output_layer.weight"

MODEL_NAMES = {
    "embedding.word_embeddings.weight": HFNames((EMBEDDING,), 0),
    "decoder.final_layernorm.weight": HFNames(("model.norm.weight",), None),
}

# Inside megatron's decoder.layers.N ↔ inside HF's model.layers.N.
LAYER_NAMES = {
    "input_layernorm.weight": HFNames(("input_layernorm.weight",), None),
    "self_attention.linear_qkv.layer_norm_weight": HFNames(("input_layernorm.weight",), None),
    "pre_mlp_layernorm.weight": HFNames(("post_attention_layernorm.weight",), None),
    "mlp.linear_fc1.layer_norm_weight": HFNames(("post_attention_layernorm.weight",), None),
    "self_attention.q_layernorm.weight": HFNames(("self_attn.q_norm.weight",), None),
    "self_attention.k_layernorm.weight": HFNames(("self_attn.k_norm.weight",), None),
    "self_attention.linear_qkv.weight": HFNames(tuple(f"self_attn.{p}_proj.weight" for p in "qkv"), 0),
    "self_attention.linear_qkv.bias": HFNames(tuple(f"self_attn.{p}_proj.bias" for p in "qkv"), 0),
    "self_attention.linear_proj.weight": HFNames(("self_attn.o_proj.weight",), 1),
    "mlp.linear_fc1.weight": HFNames(("mlp.gate_proj.weight", "mlp.up_proj.weight"), 0),
    "mlp.linear_fc2.weight": HFNames(("mlp.down_proj.weight",), 1),
    "mlp.router.weight": HFNames(("mlp.gate.weight",), None),  # a mixture-of-experts layer's router
}

# Expert N's MLP in a mixture-of-experts layer (megatron's per-expert loop, global expert numbers).
_EXPERT = re.compile(r"mlp\.experts\.local_experts\.(\d+)\.(linear_fc1|linear_fc2)\.weight")
_EXPERT_NAMES = {"linear_fc1": HFNames(("gate_proj.weight", "up_proj.weight"), 0),
                 "linear_fc2": HFNames(("down_proj.weight",), 1)}

_LAYER = re.compile(r"decoder\.layers\.(\d+)\.(.+)")
_LOCAL_EXPERT = re.compile(r"\.local_experts\.(\d+)\.")


# A routed expert's tensor as HF checkpoints name it: its layer's experts, its number, the rest of the name.
_HF_EXPERT = re.compile(r"(model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(.+)")


def hf_expert(name: str) -> tuple[str, int, str] | None:
    """HF tensor `name` split as (`model.layers.L.mlp.experts`, expert number, e.g. `gate_proj.weight`); None for a
    tensor of no expert."""
    match = _HF_EXPERT.fullmatch(name)
    return None if match is None else (match.group(1), int(match.group(2)), match.group(3))


def is_expert(name: str) -> bool:
    """Whether megatron parameter `name` is a routed expert's (split over the expert-parallel ranks)."""
    return expert_number(name) is not None


def expert_number(name: str) -> int | None:
    """The number of the routed expert whose megatron parameter `name` is (None for no expert's)."""
    match = _LOCAL_EXPERT.search(name)
    return None if match is None else int(match.group(1))


def expert_numbered_globally(name: str, first: int) -> str:
    """`name` with its expert's number on this rank made global: this rank's experts start at `first`."""
    return _LOCAL_EXPERT.sub(lambda m: f".local_experts.{int(m.group(1)) + first}.", name)


def hf_names(name: str, output_layer: str = LM_HEAD) -> HFNames:
    """The HF tensors that megatron parameter `name` (global layer numbers) holds. `output_layer` is the HF
    name of the output layer: the LM head, the embedding it is tied to, or a value head."""
    if name == OUTPUT_LAYER:
        return HFNames((output_layer,), 0)
    if name in MODEL_NAMES:
        return MODEL_NAMES[name]
    match = _LAYER.fullmatch(name)
    expert = _EXPERT.fullmatch(match.group(2)) if match else None
    if expert:
        names, tp_dim = _EXPERT_NAMES[expert.group(2)]
        prefix = f"model.layers.{match.group(1)}.mlp.experts.{expert.group(1)}"
        return HFNames(tuple(f"{prefix}.{n}" for n in names), tp_dim)
    if match is None or match.group(2) not in LAYER_NAMES:
        raise KeyError(f"no HF name for megatron parameter {name}")
    layer, rest = match.groups()
    names, tp_dim = LAYER_NAMES[rest]
    return HFNames(tuple(f"model.layers.{layer}.{n}" for n in names), tp_dim)
