"""Core attention for megatron-core's local (Transformer-Engine-free) layer spec, on torch SDPA.

megatron's own local `DotProductAttention` materialises the s×s score matrix and supports neither packed
sequences nor context parallelism. This module is swapped in through the layer spec instead:
- causal attention through `scaled_dot_product_attention` (flash / memory-efficient kernels on GPU), with
  grouped-query attention handled by the kernel;
- RoPE for packed sequences, which the layer leaves to it (megarl/models/rotary.py);
- packed sequences (THD), attending within each sequence only: on a GPU in one call of torch's FlashAttention
  varlen kernel (`torch.nn.attention.varlen.varlen_attn`), elsewhere one SDPA call per sequence (a loop that, on a
  GPU, spent seconds per step on the host: cuDNN builds a graph for every new length). The lengths come as host ints
  and device cumulative lengths made once per micro-batch (`LocalPackedSeqParams`): a layer that read them from a
  device tensor, or copied them to one, would make the host wait for the GPU;
- context parallelism: each CP rank holds, of every sequence, the two load-balanced chunks megatron uses
  (chunk r and chunk 2·cp−1−r of 2·cp); keys and values are all-gathered across the CP group, and each query
  chunk attends to the keys up to its own end with a lower-right-aligned causal mask.
"""

from __future__ import annotations

import inspect
import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.transformer.module import MegatronModule
from torch.nn.attention.bias import causal_lower_right

from megarl.models.packing import LocalPackedSeqParams, sequence_in_global_order
from megarl.models.rotary import rotate_packed

try:  # torch >= 2.9; its causal and grouped-query arguments changed between releases
    from torch.nn.attention.varlen import varlen_attn

    _VARLEN_ARGS = set(inspect.signature(varlen_attn).parameters)
except ImportError:
    varlen_attn, _VARLEN_ARGS = None, set()


class _AllGatherCP(torch.autograd.Function):
    """All-gather along dim 0 over the CP group; the backward sums the gradients of every rank's copy
    (all-reduce, then this rank's slice), which works on gloo as well as NCCL."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        ctx.rank = dist.get_rank(group)
        parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, tensor.contiguous(), group=group)
        return torch.stack(parts)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad[ctx.rank], None


def _sdpa(q, k, v, *, causal, scale, dropout):
    """[s, h, d] tensors → [s, h·d]; `causal` is True (square) or a lower-right bias."""
    q, k, v = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))
    gqa = q.shape[1] != k.shape[1]
    if causal is True:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, dropout_p=dropout, enable_gqa=gqa)
    else:
        # The lower-right causal bias runs on the memory-efficient kernel, which has no grouped-query mode.
        if gqa:
            k, v = (x.repeat_interleave(q.shape[1] // x.shape[1], dim=1) for x in (k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal, scale=scale, dropout_p=dropout)
    return out.squeeze(0).transpose(0, 1).reshape(out.shape[2], -1)


def varlen_causal(query, key, value, cu_seqlens, longest: int, scale: float) -> torch.Tensor:
    """Every packed sequence in one call of torch's FlashAttention varlen kernel: [t, h, d] → [t, h·d]."""
    kwargs = {"window_size": (-1, 0)} if "window_size" in _VARLEN_ARGS else {"is_causal": True}
    # FlashAttention takes fewer key/value heads than query heads as they are; torch's wrapper has no flag for it
    # before `enable_gqa` and passes them through. (Repeating them, as the per-sequence loop must, copied K and V
    # to every query head in every layer, forward and backward.)
    if query.shape[1] != key.shape[1] and "enable_gqa" in _VARLEN_ARGS:
        kwargs["enable_gqa"] = True
    cu = cu_seqlens.to(device=query.device, dtype=torch.int32)
    out = varlen_attn(query, key, value, cu, cu, longest, longest, scale=scale, **kwargs)
    return out.reshape(out.shape[0], -1)


class SDPAttention(MegatronModule):
    """Drop-in `core_attention` for the local spec; same constructor and forward as megatron's."""

    def __init__(self, config, layer_number, attn_mask_type, attention_type, attention_dropout=None,
                 softmax_scale=None, cp_comm_type=None, pg_collection=None):
        super().__init__(config=config)
        if pg_collection is None:
            pg_collection = ProcessGroupCollection.use_mpu_process_groups(required_pgs=["tp", "cp"])
        self.cp_group = pg_collection.cp
        head_dim = config.kv_channels
        self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
        self.dropout = config.attention_dropout if attention_dropout is None else attention_dropout

    def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                packed_seq_params=None):
        if attention_bias is not None or attention_mask is not None:
            raise ValueError("SDPAttention is causal-only: pack sequences (PackedSeqParams) instead of masking")
        dropout = self.dropout if self.training else 0.0
        if isinstance(packed_seq_params, LocalPackedSeqParams) and packed_seq_params.rotary_freqs is not None:
            query, key = (rotate_packed(x, packed_seq_params, value.dtype) for x in (query, key))
        else:  # rotated by megatron, in float32 after QKNormFloat32Out: rounded once, here, to the kernels' dtype
            query, key = query.to(value.dtype), key.to(value.dtype)
        if packed_seq_params is None:  # [s, b, h, d]
            outs = [
                _sdpa(query[:, b], key[:, b], value[:, b], causal=True, scale=self.softmax_scale, dropout=dropout)
                for b in range(query.shape[1])
            ]
            return torch.stack(outs, dim=1)
        if not isinstance(packed_seq_params, LocalPackedSeqParams):
            raise TypeError("SDPAttention takes the packed lengths of megarl.models.packing.pack_sequences")
        cp = 1 if self.cp_group is None else self.cp_group.size()
        if cp == 1 and query.is_cuda and varlen_attn is not None and dropout == 0:
            return varlen_causal(query, key, value, packed_seq_params.cu_seqlens_padded_device,
                                 packed_seq_params.max_seqlen_q, self.softmax_scale)
        # The per-sequence loops read the host lengths (a compiled layer would specialise on them; it takes the
        # varlen call above).
        lengths = packed_seq_params.padded_lengths
        if cp == 1:
            return self._packed(query, key, value, lengths, dropout)
        return self._packed_context_parallel(query, key, value, lengths, cp, dropout)

    def _packed(self, query, key, value, lengths, dropout):
        outs, start = [], 0
        for length in lengths:
            end = start + length
            outs.append(_sdpa(query[start:end], key[start:end], value[start:end], causal=True,
                              scale=self.softmax_scale, dropout=dropout))
            start = end
        return torch.cat(outs, dim=0)

    def _packed_context_parallel(self, query, key, value, lengths, cp, dropout):
        rank = dist.get_rank(self.cp_group)
        all_keys = _AllGatherCP.apply(key, self.cp_group).unbind(0)  # cp × [t_local, g, d] views
        all_values = _AllGatherCP.apply(value, self.cp_group).unbind(0)
        outs, start = [], 0
        for length in lengths:
            local, chunk = length // cp, length // (2 * cp)
            keys = sequence_in_global_order(all_keys, start, local)
            values = sequence_in_global_order(all_values, start, local)
            for offset, index in ((0, rank), (chunk, 2 * cp - 1 - rank)):
                q = query[start + offset : start + offset + chunk]
                end = (index + 1) * chunk
                outs.append(_sdpa(q, keys[:end], values[:end], causal=causal_lower_right(chunk, end),
                                  scale=self.softmax_scale, dropout=dropout))
            start += local
        return torch.cat(outs, dim=0)
