"""Run by test_rotary.py in a process of its own (megatron's parallel state): a self-attention layer of the local spec,
which leaves RoPE over packed sequences to its core attention, against megatron's SelfAttention rotating the same
way megatron always does, same weights, same packed input; float32 and bf16, with and without query/key norms. Prints
one JSON object."""

import json

import torch
from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.attention import SelfAttention
from megatron.core.transformer.spec_utils import build_module
from dataclasses import replace

from megarl.models.packing import pack_sequences
from megarl.models.spec import layer_spec
from parallel import cpu_compat, topology

cpu_compat.enable()  # a CPU test: megatron through the CPU shim
topology.init_distributed()
topology.init_model_parallel()
LENGTHS, HEADS, KV_HEADS, HEAD_DIM = [7, 1, 12, 4], 4, 2, 16


def attention_config(dtype: torch.dtype, qk_norm: bool) -> TransformerConfig:
    return TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=HEADS, num_query_groups=KV_HEADS,
                             kv_channels=HEAD_DIM, normalization="RMSNorm", qk_layernorm=qk_norm, params_dtype=dtype,
                             bf16=dtype == torch.bfloat16, use_cpu_initialization=True, add_bias_linear=False,
                             add_qkv_bias=True, init_method_std=0.5)


def compare(dtype: torch.dtype, qk_norm: bool) -> dict:
    config = attention_config(dtype, qk_norm)
    spec = layer_spec(config, use_transformer_engine=False).layer_specs[0].submodules.self_attention
    torch.manual_seed(0)
    ours = build_module(spec, config=config, layer_number=1).eval()
    megatrons = build_module(replace(spec, module=SelfAttention), config=config, layer_number=1).eval()
    megatrons.load_state_dict(ours.state_dict())
    # the same (rounded) weights and input, rotated without rounding
    float32 = build_module(replace(spec, module=SelfAttention), config=attention_config(torch.float32, qk_norm),
                           layer_number=1).eval()
    float32.load_state_dict({k: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                             for k, v in ours.state_dict().items()})
    params = pack_sequences([torch.zeros(n, dtype=torch.long) for n in LENGTHS]).packed_seq_params
    freqs = RotaryEmbedding(HEAD_DIM, rotary_percent=1.0, rotary_base=10000)(max(LENGTHS), packed_seq=True)
    hidden = torch.randn(sum(LENGTHS), 1, 64, dtype=dtype)
    with torch.no_grad():
        a, _ = ours(hidden, None, rotary_pos_emb=freqs, packed_seq_params=params)
        rotated_in_core = bool(params.rotary_tables)
        b, _ = megatrons(hidden, None, rotary_pos_emb=freqs, packed_seq_params=params)
        exact, _ = float32(hidden.float(), None, rotary_pos_emb=freqs, packed_seq_params=params)
    return {"max_abs_diff": (a.float() - b.float()).abs().max().item(), "rotated_in_core": rotated_in_core,
            "error": (a.float() - exact).norm().item(), "megatron_error": (b.float() - exact).norm().item(),
            "rope_matters": (b.float() - megatrons(hidden, None, packed_seq_params=params)[0].float()).abs().max().item()}


print(json.dumps({f"{dtype}-{'qk_norm' if qk_norm else 'plain'}": compare(dtype, qk_norm)
                  for dtype in (torch.float32, torch.bfloat16) for qk_norm in (False, True)}))
topology.destroy()
