"""Run by test_qk_norm.py in a process of its own (megatron's RoPE reads the context-parallel group): RoPE on
QKNormFloat32Out's output against a float64 rotation, in the packed (THD) form megarl's forward uses, and
SDPAttention on the float32 query/key that follow. Prints one JSON object."""

import json

import torch
from megatron.core.models.common.embeddings.rope_utils import apply_rotary_pos_emb
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer import TransformerConfig

from megarl.models.attention import SDPAttention
from megarl.models.packing import pack_sequences
from megarl.models.qk_norm import QKNormFloat32Out
from parallel import cpu_compat, topology

cpu_compat.enable()  # a CPU test: megatron through the CPU shim
topology.init_distributed()
topology.init_model_parallel()
HEADS, HEAD_DIM, LENGTHS = 4, 128, [700, 1348]
config = TransformerConfig(num_layers=1, hidden_size=HEADS * HEAD_DIM, num_attention_heads=HEADS,
                           kv_channels=HEAD_DIM, normalization="RMSNorm", qk_layernorm=True)
torch.manual_seed(0)
norm = QKNormFloat32Out(config, HEAD_DIM, eps=1e-6)
torch.nn.init.uniform_(norm.weight, 0.5, 1.5)
norm.bfloat16()
query = torch.randn(sum(LENGTHS), HEADS, HEAD_DIM).bfloat16()
normed = norm(query)
model_dtype_norm = torch.nn.functional.rms_norm(query.float(), (HEAD_DIM,), norm.weight.float(), 1e-6).bfloat16()

inv_freq = 1.0 / (1e6 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
angles = torch.outer(torch.arange(max(LENGTHS), dtype=torch.float32), inv_freq)
freqs = torch.cat([angles, angles], dim=-1)[:, None, None, :]
cu_seqlens = pack_sequences([torch.zeros(n, dtype=torch.long) for n in LENGTHS]).packed_seq_params.cu_seqlens_q
cp_group = ProcessGroupCollection.use_mpu_process_groups(required_pgs=["cp"]).cp


def rotate(t, f):
    return apply_rotary_pos_emb(t, f, config, cu_seqlens=cu_seqlens, cp_group=cp_group)


exact = rotate(normed.double(), freqs.double())
float32_path = rotate(normed, freqs)
bf16_path = rotate(normed.bfloat16(), freqs)

attention = SDPAttention(config, layer_number=1, attn_mask_type=None, attention_type="self",
                         pg_collection=ProcessGroupCollection.use_mpu_process_groups(required_pgs=["tp", "cp"])).eval()
value = torch.randn(sum(LENGTHS), HEADS, HEAD_DIM).bfloat16()
packed = pack_sequences([torch.zeros(n, dtype=torch.long) for n in LENGTHS]).packed_seq_params
out_float32_in = attention(float32_path, float32_path, value, None, packed_seq_params=packed)
out_rounded_in = attention(float32_path.bfloat16(), float32_path.bfloat16(), value, None, packed_seq_params=packed)
print(json.dumps({
    "norm_dtype": str(normed.dtype),
    "norm_vs_model_dtype_norm": (normed.bfloat16().float() - model_dtype_norm.float()).abs().max().item(),
    "rope_dtype": str(float32_path.dtype),
    "rope_error_float32": (float32_path.bfloat16().double() - exact).abs().mean().item(),
    "rope_error_bf16": (bf16_path.double() - exact).abs().mean().item(),
    "attention_dtype": str(out_float32_in.dtype),
    "attention_same_as_rounded_input": torch.equal(out_float32_in, out_rounded_in),
}))
topology.destroy()
