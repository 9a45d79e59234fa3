"""The layer specs of one pipeline stage: Transformer Engine's where the role's `megatron.transformer_impl` names it,
else (the default, `auto`, too) megatron-core's local spec with the core attention swapped for SDPAttention, the
self-attention for SelfAttentionRotaryInCore (which leaves RoPE over packed sequences to SDPAttention), query/key
norms (where the model has them) for QKNormFloat32Out, which lets RoPE rotate in float32, and the layer for
CompiledTransformerLayer, compiled whole on a GPU (swaps through the spec, not a fork of the layer; LoRA's layers
stay megatron's, uncompiled).

Both come from megatron-core's `get_gpt_decoder_block_spec`, so both slice the layers per pipeline stage (and
virtual stage) the same way. With LoRA (`adapter`), the local spec's linear layers are swapped for their LoRA
subclasses (megarl/models/lora.py); LoRA always runs on the local spec.
"""

from __future__ import annotations

from dataclasses import replace

from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.torch_norm import WrappedTorchNorm
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
from megatron.core.transformer.transformer_layer import TransformerLayer

from megarl.models.attention import SDPAttention
from megarl.models.compiled_layer import CompiledTransformerLayer
from megarl.models.lora import Adapter, lora_layer_spec
from megarl.models.qk_norm import QKNormFloat32Out
from megarl.models.rotary import SelfAttentionRotaryInCore


def layer_spec(config, use_transformer_engine: bool, vp_stage: int | None = None, adapter: Adapter | None = None,
               adapter_targets: tuple[str, ...] = ()) -> TransformerBlockSubmodules:
    if adapter is not None:
        # LoRA's layers run eagerly: compiled, they have not been checked on a GPU.
        local = _local_block(config, vp_stage, compiled=False)
        return lora_layer_spec(local, adapter, adapter_targets, gated=config.gated_linear_unit)
    if use_transformer_engine:
        return get_gpt_decoder_block_spec(config, use_transformer_engine=True, vp_stage=vp_stage)
    return _local_block(config, vp_stage, compiled=True)


def _local_block(config, vp_stage: int | None, compiled: bool) -> TransformerBlockSubmodules:
    block = get_gpt_decoder_block_spec(
        config, use_transformer_engine=False, normalization=config.normalization, vp_stage=vp_stage
    )
    # The final norm is the layers' own (torch RMSNorm): the block spec would pick Apex's FusedLayerNorm where
    # Apex is installed, and that one is LayerNorm only.
    return replace(block, layer_specs=[_local_layer(layer, compiled) for layer in block.layer_specs],
                   layer_norm=WrappedTorchNorm)


def _local_layer(layer: ModuleSpec, compiled: bool) -> ModuleSpec:
    attention = layer.submodules.self_attention
    swaps = {"core_attention": SDPAttention}
    if attention.submodules.q_layernorm not in (None, IdentityOp):
        swaps.update(q_layernorm=QKNormFloat32Out, k_layernorm=QKNormFloat32Out)
    attention = replace(attention, module=SelfAttentionRotaryInCore,
                        submodules=replace(attention.submodules, **swaps))
    module = CompiledTransformerLayer if compiled and layer.module is TransformerLayer else layer.module
    return replace(layer, module=module, submodules=replace(layer.submodules, self_attention=attention))
