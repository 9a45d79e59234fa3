"""Actor weights from megatron's training layout into a colocated rollout engine's layout, in buckets of bounded
size: the 3D-HybridEngine idea.

Every GPU hosts one tensor-parallel rank of a rollout engine (`parallel.engines.engine_slots`). Its slot is chosen
so that the weights it needs are as close as possible to the training shards already on that GPU:

- rollout TP R = training TP T (and any PP): each rank converts its own shard; nothing is gathered.
- R < T: the T/R engines of a training TP group are strided over it (GPU step T/R, SGLang's `gpu_id_step`),
  so engine rank j needs exactly the shards of the T/R consecutive ranks j·T/R…: gathered within that
  sub-group only, never the whole model.
- R > T: engines span consecutive GPUs; each rank gathers within its training TP group (nothing when T = 1)
  and keeps its part.
- Pipeline stages send only the layers they own, broadcast to the same slot of the other stages.
- Expert parallelism (a mixture-of-experts model): each rank owns some experts. For an engine rank that holds
  every expert, an expert's slot tensor is broadcast from its owner over the expert-parallel group (whose ranks
  share a tensor-parallel rank, hence a slot part). For an engine with expert parallelism of its own (SGLang's,
  `EngineExperts`), each engine rank gets its experts whole and a one-element placeholder for the others (the
  engine's loader skips experts not on its rank); an expert travels, point to point, only to the ranks that need
  it and do not hold it, so where the engine's experts lie as the training ranks' do (engine EP = training EP),
  none travels.
- Data- and context-parallel replicas hold equal weights and serve their own engines: no traffic.

Megatron's rank order puts a training TP group on consecutive ranks (tensor parallel innermost). The stream
is a collective: every rank of the world calls `sync_weights` and its `sink` gets, bucket by bucket and in the
same order everywhere, the HF-named tensors (or their tensor-parallel slices, with the dim they are split on)
that its engine rank holds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
import torch.distributed as dist

from parallel import topology
from parallel.engines import EngineExperts, EngineSlot

Part = tuple[str, torch.Tensor, "int | None"]  # (HF name, tensor, tensor-parallel dim or None)
# This rank's weights, named the same on every stage, in the same order on every call (each may be made as it is
# reached, e.g. a LoRA layer's merged weight: only one is held at a time).
NamedParameters = Callable[[], Iterable[tuple[str, torch.Tensor]]]
Convert = Callable[[str, torch.Tensor], list[Part]]  # a parameter of those names + tensor → HF parts


@dataclass
class SyncStats:
    seconds: float = 0.0
    bytes_received: int = 0  # by this rank, over gathers and pipeline broadcasts
    peak_extra_bytes: int = 0  # memory the sync held beyond the model (GPU: allocator peak; CPU: its own tensors)
    tensors: int = 0
    buckets: int = 0

    def metrics(self) -> dict[str, float]:
        return {"update_weights/stream_s": self.seconds, "update_weights/bytes_received_gb": self.bytes_received / 1e9,
                "update_weights/peak_extra_memory_gb": self.peak_extra_bytes / 1e9}


class WeightStreamer:
    """Streams one model's weights into this rank's engine slot. Build it once per model (it exchanges the
    parameter list of every pipeline stage and creates the gather groups), then call `sync` after each update."""

    def __init__(self, named_parameters: NamedParameters, convert: Convert, slot: EngineSlot,
                 all_slots: list[EngineSlot], pp_group=None, bucket_bytes: int = 512 << 20, ep_group=None,
                 expert_number: Callable[[str], int | None] = lambda name: None,
                 engine_experts: EngineExperts = EngineExperts()):
        """`ep_group`, `expert_number`: with expert parallelism, its group and the routed expert a parameter name is
        of (named by their global numbers; None: no expert's). `engine_experts`: which experts each engine rank
        holds."""
        self.named_parameters, self.convert, self.slot = named_parameters, convert, slot
        self.pp_group, self.bucket_bytes = pp_group, bucket_bytes
        self.gather_group = topology.process_group_of(slot.gather_ranks, (s.gather_ranks for s in all_slots))
        self.ep_group = ep_group if ep_group is not None and dist.get_world_size(ep_group) > 1 else None
        self.my_expert_rank = dist.get_rank(self.ep_group) if self.ep_group is not None else 0
        self.ep_ranks = dist.get_process_group_ranks(self.ep_group) if self.ep_group is not None else []
        self.expert_number, self.engine_experts = expert_number, engine_experts
        self.ep_engine_ranks = [all_slots[rank].engine_rank for rank in self.ep_ranks]
        stages_count = dist.get_world_size(pp_group) if pp_group is not None else 1
        if engine_experts.per_rank is not None and (self.gather_group is not None or stages_count > 1):
            raise ValueError("an engine with expert parallelism takes its experts from training ranks of tensor and "
                             "pipeline parallel 1")
        local = self._stage_entries([(name, tuple(t.shape), t.dtype) for name, t in named_parameters()])
        stages: list = [local]
        if stages_count > 1:
            stages = [None] * stages_count
            dist.all_gather_object(stages, local, group=pp_group)
        self.my_stage = dist.get_rank(pp_group) if pp_group is not None else 0
        self.pp_ranks = dist.get_process_group_ranks(pp_group) if pp_group is not None else [dist.get_rank()]
        self.manifest = [(stage, *entry) for stage, entries in enumerate(stages) for entry in entries]

    def _stage_entries(self, local: list) -> list:
        """This stage's (owning expert-parallel rank or None, name, shape, dtype), the same on its every rank:
        where this rank has an expert, every expert-parallel rank's expert at that place in its list."""
        if self.ep_group is None:
            return [(None, *param) for param in local]
        ranks: list = [None] * dist.get_world_size(self.ep_group)
        dist.all_gather_object(ranks, local, group=self.ep_group)
        entries = []
        for params in zip(*ranks, strict=True):
            if self.expert_number(params[0][0]) is not None:
                entries += [(owner, *param) for owner, param in enumerate(params)]
            else:
                entries.append((None, *params[0]))
        return entries

    def sync(self, sink: Callable[[list[Part]], None]) -> SyncStats:
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            baseline = torch.cuda.memory_allocated()
        stats, start = SyncStats(), time.perf_counter()
        local = iter(self.named_parameters())
        bucket, held = [], 0
        for stage, expert_owner, name, shape, dtype in self.manifest:
            in_stage = stage == self.my_stage
            owned = in_stage and expert_owner in (None, self.my_expert_rank)
            source = _next_named(local, name) if owned else torch.empty(shape, dtype=dtype, device="meta")
            expert = self.expert_number(name)
            for hf_name, tensor, dim in self.convert(name, source):
                if expert is not None and self.engine_experts.per_rank is not None:
                    out, dim = self._whole_expert(tensor, expert_owner, expert, owned, stats), None
                else:
                    out = self._slot_tensor_of(tensor, dim, stage, expert_owner, owned, stats)
                bucket.append((hf_name, out, dim))
                held += out.numel() * out.element_size()
                stats.peak_extra_bytes = max(stats.peak_extra_bytes, held)
                stats.tensors += 1
            if held >= self.bucket_bytes:
                sink(bucket)
                stats.buckets += 1
                bucket, held = [], 0
        if bucket:
            sink(bucket)
            stats.buckets += 1
        if cuda:
            torch.cuda.synchronize()
            stats.peak_extra_bytes = torch.cuda.max_memory_allocated() - baseline
        stats.seconds = time.perf_counter() - start
        return stats

    def _slot_tensor_of(self, tensor: torch.Tensor, dim, stage: int, expert_owner: int | None, owned: bool,
                        stats: SyncStats) -> torch.Tensor:
        """This slot's part of a tensor of pipeline `stage` (of an expert that `expert_owner` holds, if not None):
        made by its owner, broadcast to the ranks of the stage's expert-parallel group and to the other stages."""
        in_stage = stage == self.my_stage
        out = self._slot_tensor(tensor, dim, stats) if owned else self._empty_slot_tensor(tensor, dim)
        if in_stage and expert_owner is not None:
            if not owned:
                stats.bytes_received += out.numel() * out.element_size()
            dist.broadcast(out, src=self.ep_ranks[expert_owner], group=self.ep_group)
        if len(self.pp_ranks) > 1:
            if not in_stage:
                stats.bytes_received += out.numel() * out.element_size()
            dist.broadcast(out, src=self.pp_ranks[stage], group=self.pp_group)
        return out

    def _whole_expert(self, tensor: torch.Tensor, owner: int | None, expert: int, owned: bool,
                      stats: SyncStats) -> torch.Tensor:
        """An expert's tensor for an engine with expert parallelism: whole on the engine ranks that hold the expert,
        sent point to point from its owner to those of them that do not; a placeholder elsewhere."""
        wanted = self.engine_experts.holds(self.slot.engine_rank, expert)
        if owner is None:  # every rank holds every expert
            out = tensor.contiguous() if wanted else None
        elif owned:
            out = tensor.contiguous()
            lacking = [self.ep_ranks[rank] for rank, engine_rank in enumerate(self.ep_engine_ranks)
                       if rank != owner and self.engine_experts.holds(engine_rank, expert)]
            for request in [dist.isend(out, dst) for dst in lacking]:
                request.wait()
        elif wanted:
            out = self._empty_slot_tensor(tensor, None)
            dist.irecv(out, src=self.ep_ranks[owner]).wait()
            stats.bytes_received += out.numel() * out.element_size()
        else:
            out = None
        if out is None or not wanted:
            return self._empty_slot_tensor(tensor.new_empty(1, device="meta"), None)
        return out

    def _slot_tensor(self, tensor: torch.Tensor, dim, stats: SyncStats) -> torch.Tensor:
        """Gather this slot's shards (owner stage), then keep its part."""
        slot = self.slot
        if dim is None:
            return tensor.contiguous()
        if self.gather_group is not None:
            pieces = [torch.empty_like(tensor, memory_format=torch.contiguous_format) for _ in slot.gather_ranks]
            dist.all_gather(pieces, tensor.contiguous(), group=self.gather_group)
            stats.bytes_received += tensor.numel() * tensor.element_size() * (len(pieces) - 1)
            tensor = torch.cat(pieces, dim=dim)
        if slot.parts > 1:
            tensor = tensor.chunk(slot.parts, dim=dim)[slot.part]
        return tensor.contiguous()

    def _empty_slot_tensor(self, meta: torch.Tensor, dim) -> torch.Tensor:
        shape = list(meta.shape)
        if dim is not None:
            shape[dim] = shape[dim] * len(self.slot.gather_ranks) // self.slot.parts
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
        return torch.empty(shape, dtype=meta.dtype, device=device)


def _next_named(parameters, name: str) -> torch.Tensor:
    own_name, tensor = next(parameters)
    if own_name != name:
        raise RuntimeError(f"the model's parameters changed since the streamer was built: {own_name} in place of {name}")
    return tensor
