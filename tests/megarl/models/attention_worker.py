"""Run by test_attention.py in a process of its own (SDPAttention reads megatron's context-parallel group): packed
attention, its cumulative-length tensors moved to the meta device where no value can be read, against each sequence
attended alone. On a GPU those tensors are device tensors, and reading one in a layer stalls the host. Prints one
JSON object."""

import dataclasses
import json

import torch
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer import TransformerConfig

from megarl.models.attention import SDPAttention
from megarl.models.packing import pack_sequences
from parallel import cpu_compat, topology

cpu_compat.enable()  # a CPU test: megatron through the CPU shim
topology.init_distributed()
topology.init_model_parallel()
HEADS, KV_HEADS, HEAD_DIM, LENGTHS = 4, 2, 16, [5, 1, 9, 3]
config = TransformerConfig(num_layers=1, hidden_size=HEADS * HEAD_DIM, num_attention_heads=HEADS,
                           num_query_groups=KV_HEADS, kv_channels=HEAD_DIM)
attention = SDPAttention(config, layer_number=1, attn_mask_type=None, attention_type="self",
                         pg_collection=ProcessGroupCollection.use_mpu_process_groups(required_pgs=["tp", "cp"])).eval()
torch.manual_seed(0)
query = torch.randn(sum(LENGTHS), HEADS, HEAD_DIM)
key, value = torch.randn(sum(LENGTHS), KV_HEADS, HEAD_DIM), torch.randn(sum(LENGTHS), KV_HEADS, HEAD_DIM)
params = pack_sequences([torch.zeros(n, dtype=torch.long) for n in LENGTHS]).packed_seq_params
tensors = ("cu_seqlens_q", "cu_seqlens_kv", "cu_seqlens_q_padded", "cu_seqlens_kv_padded", "cu_seqlens_padded_device")
unreadable = dataclasses.replace(params, **{name: getattr(params, name).to("meta") for name in tensors})
packed = attention(query, key, value, None, packed_seq_params=unreadable)
starts = torch.tensor([0, *LENGTHS]).cumsum(0).tolist()
alone = torch.cat([attention(query[s:e, None], key[s:e, None], value[s:e, None], None)[:, 0]
                   for s, e in zip(starts, starts[1:])])
print(json.dumps({"shape": list(packed.shape), "max_abs_diff": (packed - alone).abs().max().item()}))
topology.destroy()
