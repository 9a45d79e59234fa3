"""The transformer layer spec: Transformer Engine's when it is importable, else megatron-core's local spec
with the core attention swapped for SDPAttention (a submodule swap, not a fork of the layer)."""

from __future__ import annotations

from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_layer_local_spec
from megatron.core.transformer.spec_utils import ModuleSpec

from megarl.models.attention import SDPAttention


def local_layer_spec(qk_layernorm: bool) -> ModuleSpec:
    spec = get_gpt_layer_local_spec(qk_layernorm=qk_layernorm, normalization="RMSNorm")
    spec.submodules.self_attention.submodules.core_attention = SDPAttention
    return spec


def layer_spec(config, use_transformer_engine: bool, vp_stage: int | None = None):
    if use_transformer_engine:
        return get_gpt_decoder_block_spec(config, use_transformer_engine=True, vp_stage=vp_stage)
    return local_layer_spec(config.qk_layernorm)
