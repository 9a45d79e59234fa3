"""Sequence packing: variable-length samples in one row without padding between them (THD layout), split
across context-parallel ranks the way megatron expects; and micro-batches by token budget.

Each sample is padded only to a multiple of 2·cp (so it splits into 2·cp equal chunks); with context
parallelism rank r keeps chunks r and 2·cp−1−r of every sample, which balances causal attention work.

The cumulative lengths stay in host memory unless Transformer Engine (whose kernels read them on the GPU)
is present: megatron's RoPE on the local spec splits sequences by them in Python, and device copies would cost a
GPU→host synchronisation in every layer. SDPAttention takes its lengths as host ints (`LocalPackedSeqParams`).

A micro-batch is packed in host memory and its few tensors then copied to the device through pinned memory: torch's
copy from pageable memory first waits for the GPU to finish the work queued before it, so a copy per sample and
field stalled the host on the GPU many times per micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.packed_seq_params import PackedSeqParams
from megatron.core.utils import get_model_config

from megarl.models.accelerators import moe_token_dispatcher, transformer_engine_available
from megarl.models.router_replay import packed_routing


@dataclass
class LocalPackedSeqParams(PackedSeqParams):
    """megatron's parameters plus what SDPAttention (megarl/models/attention.py) needs in every layer, made once per
    micro-batch: the padded sample lengths as host ints, the padded cumulative lengths on the compute device for the
    varlen kernel, and the tokens' positions for RoPE. Deriving either kind from the other in a layer would synchronise
    the host with the GPU."""

    padded_lengths: tuple[int, ...] = ()
    cu_seqlens_padded_device: torch.Tensor | None = None
    positions_device: torch.Tensor | None = None  # each local token's position in its sample (megarl/models/rotary.py)
    rotary_freqs: torch.Tensor | None = None  # lent by a layer that leaves RoPE to the core attention, for that call
    rotary_tables: dict = field(default_factory=dict)  # cos and sin, shared by every layer's copy of these parameters


@dataclass
class PackedBatch:
    input_ids: torch.Tensor  # [1, local tokens]: this CP rank's chunks of every padded sample
    labels: torch.Tensor  # [1, local tokens]: the next token at each position (0 past a sample's end)
    packed_seq_params: PackedSeqParams
    lengths: list[int]  # true sample lengths
    padded_lengths: list[int]  # lengths padded to a multiple of 2·cp
    cp_size: int
    cp_rank: int
    token_fields: dict[str, torch.Tensor] = field(default_factory=dict)  # [1, local tokens] each
    routed_experts: torch.Tensor | None = None  # router replay: [local tokens, MoE layers, top-k] (router_replay.py)

    def unpack(self, full: torch.Tensor) -> list[torch.Tensor]:
        """[1, all tokens] in global padded order → per-sample tensors of their true length."""
        out, start = [], 0
        for length, padded in zip(self.lengths, self.padded_lengths):
            out.append(full[0, start : start + length])
            start += padded
        return out

    def to_global(self, gathered: list[torch.Tensor]) -> torch.Tensor:
        """Per-CP-rank [1, local tokens] tensors (index = CP rank) → [1, all tokens] in global order."""
        if self.cp_size == 1:
            return gathered[0]
        per_rank = [g[0] for g in gathered]
        pieces, start = [], 0
        for padded in self.padded_lengths:
            local = padded // self.cp_size
            pieces.append(sequence_in_global_order(per_rank, start, local))
            start += local
        return torch.cat(pieces).unsqueeze(0)


def sequence_in_global_order(per_rank, start: int, local: int) -> torch.Tensor:
    """One sample's tokens reassembled from every CP rank's share (index = CP rank; each holds the sample at
    [start, start + local) along dim 0): rank j holds chunks j and 2·cp−1−j, in that order."""
    chunk = local // 2
    first = [part[start : start + chunk] for part in per_rank]
    second = [part[start + chunk : start + local] for part in reversed(per_rank)]
    return torch.cat(first + second)


def _local_chunks(tokens: torch.Tensor, cp_size: int, cp_rank: int) -> torch.Tensor:
    if cp_size == 1:
        return tokens
    chunks = tokens.chunk(2 * cp_size)
    return torch.cat([chunks[cp_rank], chunks[2 * cp_size - 1 - cp_rank]])


def pack_sequences(
    sequences: list[torch.Tensor | list[int]],
    cp_size: int = 1,
    cp_rank: int = 0,
    device=None,
    token_fields: dict[str, list[torch.Tensor]] | None = None,
    total: int | None = None,
    routing: list[torch.Tensor] | None = None,
) -> PackedBatch:
    """Pack samples (1-D token ids) into one THD row for this CP rank, on `device` (default: the host).

    `token_fields` are per-sample tensors over next-token positions (length L−1 for a sample of length L,
    like `labels`: advantages, old log-probs, masks); they are packed and split the same way, zero-padded.
    `total`: the row's padded tokens, the last sample's padding made longer to reach it (after every real token, so
    no output changes). `routing`: each sample's routed experts to replay, [L − 1, MoE layers, top-k]."""
    if not sequences:
        raise ValueError("cannot pack an empty list of sequences")
    token_fields = token_fields or {}
    multiple = 2 * cp_size if cp_size > 1 else 1
    padded_lengths = [-(-len(seq) // multiple) * multiple for seq in sequences]
    if total is not None:
        padded_lengths[-1] += total - sum(padded_lengths)
    ids_parts, label_parts, lengths = [], [], []
    field_parts: dict[str, list[torch.Tensor]] = {name: [] for name in token_fields}
    for index, (seq, padded) in enumerate(zip(sequences, padded_lengths)):
        seq = torch.as_tensor(seq, dtype=torch.long, device="cpu")
        length = seq.numel()
        ids = torch.zeros(padded, dtype=torch.long)
        ids[:length] = seq
        labels = torch.zeros_like(ids)
        labels[: length - 1] = seq[1:]
        ids_parts.append(_local_chunks(ids, cp_size, cp_rank))
        label_parts.append(_local_chunks(labels, cp_size, cp_rank))
        for name, values in token_fields.items():
            value = torch.as_tensor(values[index], device="cpu")
            if value.numel() != length - 1:
                raise ValueError(f"token field {name!r} of sample {index} has {value.numel()} values, not {length - 1}")
            padded_value = value.new_zeros(padded)
            padded_value[: length - 1] = value
            field_parts[name].append(_local_chunks(padded_value, cp_size, cp_rank))
        lengths.append(length)
    routed = None
    if routing is not None:
        routed = torch.cat([_local_chunks(packed_routing(r, length, padded), cp_size, cp_rank)
                            for r, length, padded in zip(routing, lengths, padded_lengths)])
    return PackedBatch(
        input_ids=to_device(torch.cat(ids_parts).unsqueeze(0), device),
        labels=to_device(torch.cat(label_parts).unsqueeze(0), device),
        packed_seq_params=_packed_seq_params(lengths, padded_lengths, device, cp_size, cp_rank),
        lengths=lengths,
        padded_lengths=padded_lengths,
        cp_size=cp_size,
        cp_rank=cp_rank,
        token_fields={name: to_device(torch.cat(parts).unsqueeze(0), device) for name, parts in field_parts.items()},
        routed_experts=None if routed is None else to_device(routed, device),
    )


def _packed_seq_params(lengths: list[int], padded_lengths: list[int], device, cp_size: int,
                       cp_rank: int) -> LocalPackedSeqParams:
    cu = torch.tensor([0] + lengths, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    positions = torch.cat([_local_chunks(torch.arange(padded), cp_size, cp_rank) for padded in padded_lengths])
    cu_padded = torch.tensor([0] + padded_lengths, dtype=torch.int32).cumsum(0, dtype=torch.int32)
    cu_padded_device = to_device(cu_padded, device)
    if transformer_engine_available():
        cu, cu_padded = to_device(cu, device), cu_padded_device
    return LocalPackedSeqParams(
        qkv_format="thd",
        cu_seqlens_q=cu,
        cu_seqlens_kv=cu,
        cu_seqlens_q_padded=cu_padded,
        cu_seqlens_kv_padded=cu_padded,
        max_seqlen_q=max(padded_lengths),
        max_seqlen_kv=max(padded_lengths),
        padded_lengths=tuple(padded_lengths),
        cu_seqlens_padded_device=cu_padded_device,
        positions_device=to_device(positions, device),
    )


def to_device(tensor: torch.Tensor, device) -> torch.Tensor:
    """A host tensor on `device` (None: left where it is). To a GPU without blocking, from pinned memory: a blocking
    copy makes the host wait for all the work already queued on the GPU. (torch's pinned-memory allocator keeps the
    staging block until the copy has run.)"""
    if device is None or torch.device(device).type != "cuda":
        return tensor if device is None else tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def pack_micro_batches(sequences: Sequence, groups: Sequence[Sequence[int]], device=None,
                       token_fields: dict[str, list[torch.Tensor]] | None = None,
                       routing: Sequence[torch.Tensor] | None = None, one_length: bool = False,
                       min_tokens: int = 0) -> list[PackedBatch]:
    """One packed batch per group of sample indices, holding this rank's context-parallel part of megatron's mesh;
    `token_fields` and `routing` as `pack_sequences` takes them, one tensor per sample of `sequences`. `one_length`:
    every batch padded to as many tokens (`pipeline_needs_one_length`), at least `min_tokens` (another part of the
    pass's micro-batches: `padded_tokens`)."""
    cp_size, cp_rank = parallel_state.get_context_parallel_world_size(), parallel_state.get_context_parallel_rank()
    fields = token_fields or {}
    totals = equal_token_totals(sequences, groups, cp_size, one_length, min_tokens)
    return [pack_sequences([sequences[i] for i in group], cp_size, cp_rank, device,
                           {name: [values[i] for i in group] for name, values in fields.items()}, total,
                           None if routing is None else [routing[i] for i in group])
            for group, total in zip(groups, totals)]


def equal_token_totals(sequences: Sequence, groups: Sequence[Sequence[int]], cp_size: int,
                       one_length: bool = False, min_tokens: int = 0) -> list[int | None]:
    """Each micro-batch's padded tokens where they must be equal: on every rank of a mixture-of-experts layer's
    tensor × expert-parallel group for its all-gather token dispatcher (megatron's, on CPU) — the group's largest, so
    every rank runs as many micro-batches of as many tokens — and, with `one_length`, over the micro-batches too.
    None each elsewhere."""
    gathers = parallel_state.get_expert_model_parallel_world_size() > 1 and moe_token_dispatcher() == "allgather"
    if not (gathers or one_length):
        return [None] * len(groups)  # the group's tensor-parallel ranks hold the same samples
    multiple = 2 * cp_size if cp_size > 1 else 1
    totals = [sum(-(-len(sequences[i]) // multiple) * multiple for i in g) for g in groups]
    if gathers:
        totals = _largest_over_expert_group(totals)
    return [max(*totals, min_tokens)] * len(totals) if one_length and totals else totals


def padded_tokens(batches: Sequence[PackedBatch]) -> int:
    """The most tokens a packed batch of `batches` holds, over every context-parallel rank (0: none)."""
    return max((sum(batch.padded_lengths) for batch in batches), default=0)


def _largest_over_expert_group(mine: list[int]) -> list[int]:
    group = parallel_state.get_expert_tensor_and_model_parallel_group()
    counts = torch.tensor([len(mine), -len(mine)])
    dist.all_reduce(counts, op=dist.ReduceOp.MAX, group=group)
    if counts[0] != -counts[1]:
        raise RuntimeError(f"the ranks of an expert-parallel group run {-int(counts[1])} to {int(counts[0])} "
                           "micro-batches, but every MoE layer's token exchange needs all of them in each: "
                           "use_dynamic_bsz=false, or samples that split alike")
    totals = torch.tensor(mine)
    dist.all_reduce(totals, op=dist.ReduceOp.MAX, group=group)
    return totals.tolist()


def pipeline_needs_one_length(model) -> bool:
    """Whether megatron's pipeline stages pass each other activations of one shape (`seq_length`) in every
    micro-batch of a pass: where the model's config turns `variable_seq_lengths` off (megatron's all-gather MoE
    token dispatcher, on CPU: bridge._dispatcher) and there are stages. `model`: its chunks, or the one."""
    return (parallel_state.get_pipeline_model_parallel_world_size() > 1
            and not get_model_config(model[0] if isinstance(model, list) else model).variable_seq_lengths)


@dataclass(frozen=True)
class MicroBatching:
    """How a role splits its rank's samples into micro-batches: `per_gpu` samples at a time, or (`dynamic`, verl's
    use_dynamic_bsz) by a budget of `max_tokens` tokens."""

    dynamic: bool
    per_gpu: int
    max_tokens: int

    def split(self, lengths: list[int]) -> list[list[int]]:
        """Sample indices per micro-batch, for samples of these lengths."""
        if self.dynamic:
            return token_budget_micro_batches(lengths, self.max_tokens)
        return [list(range(i, min(i + self.per_gpu, len(lengths)))) for i in range(0, len(lengths), self.per_gpu)]


def token_budget_micro_batches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Split sample indices into micro-batches of at most `max_tokens` tokens each (a longer sample gets a
    micro-batch of its own), balancing token counts: fewest micro-batches first, then longest-first
    greedy placement into the lightest one. Every index appears exactly once; the micro-batch of the most tokens comes
    first, so that the allocator's blocks for it serve the rest of the pass."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be ≥ 1, got {max_tokens}")
    total = sum(lengths)
    count = max(-(-total // max_tokens), sum(1 for n in lengths if n > max_tokens), 1 if lengths else 0)
    while True:
        bins: list[list[int]] = [[] for _ in range(count)]
        loads = [0] * count
        fits = True
        for index in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
            target = min(range(count), key=lambda b: loads[b])
            if loads[target] and loads[target] + lengths[index] > max_tokens:
                fits = False
                break
            bins[target].append(index)
            loads[target] += lengths[index]
        if fits:
            return [sorted(bins[b]) for b in sorted(range(count), key=lambda b: -loads[b]) if bins[b]]
        count += 1
