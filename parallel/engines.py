"""Where the colocated rollout engines run: every GPU (training rank) hosts one tensor-parallel rank of an engine,
in the slot `engine_slots` gives it, chosen so that the weights that engine rank needs are as close as possible to
the training shards already on that GPU (parallel/reshard.py streams them; its docstring gives the layouts).
`place_engines` is the collective that finds this rank's slot, the engine's gloo group and the CUDA devices of
the engine's GPUs."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch.distributed as dist


@dataclass(frozen=True)
class EngineSlot:
    """The rollout engine rank that one GPU (training rank) hosts."""

    engine: int  # global index of the engine
    engine_rank: int  # its tensor-parallel rank within the engine
    engine_ranks: tuple[int, ...]  # the engine's training ranks, in engine-rank order
    gather_ranks: tuple[int, ...]  # training ranks whose shards, concatenated in order, hold this slot's weights
    part: int  # ...of which the slot keeps part `part` of `parts`
    parts: int


@dataclass(frozen=True)
class EngineExperts:
    """Which routed experts of a mixture-of-experts model each rank of an engine holds: every one (`per_rank` None:
    an engine of one GPU, or one that splits each expert over its ranks), or the engine's expert parallelism, engine
    rank j holding the `per_rank` experts from j·per_rank whole."""

    per_rank: int | None = None

    def holds(self, engine_rank: int, expert: int) -> bool:
        return self.per_rank is None or expert // self.per_rank == engine_rank


def engine_slots(world_size: int, train_tp: int, rollout_tp: int) -> list[EngineSlot]:
    """Slot of every training rank (index = rank) for rollout engines of `rollout_tp` GPUs."""
    big, small = max(train_tp, rollout_tp), min(train_tp, rollout_tp)
    if big % small or world_size % big:
        raise ValueError(
            f"rollout TP {rollout_tp} and training TP {train_tp} must divide one another and the {world_size} GPUs"
        )
    slots = []
    for rank in range(world_size):
        start, t = rank - rank % train_tp, rank % train_tp
        if rollout_tp <= train_tp:
            stride = train_tp // rollout_tp
            j, e = t // stride, t % stride
            slots.append(EngineSlot(
                engine=rank // train_tp * stride + e, engine_rank=j,
                engine_ranks=tuple(start + e + stride * i for i in range(rollout_tp)),
                gather_ranks=tuple(start + j * stride + i for i in range(stride)), part=0, parts=1,
            ))
        else:
            first = rank - rank % rollout_tp
            slots.append(EngineSlot(
                engine=rank // rollout_tp, engine_rank=rank % rollout_tp,
                engine_ranks=tuple(range(first, first + rollout_tp)),
                gather_ranks=tuple(range(start, start + train_tp)), part=rank % rollout_tp, parts=rollout_tp,
            ))
    return slots


@dataclass(frozen=True)
class EnginePlacement:
    """This rank's place among the rollout engines."""

    slot: EngineSlot
    slots: list[EngineSlot]  # every rank's, index = rank
    group: object  # a gloo group of the engine's ranks (None for an engine of one GPU)
    local_devices: list[int]  # the CUDA device index of each engine rank's GPU, as its own process counts them

    @property
    def engine_count(self) -> int:
        return len({s.engine for s in self.slots})


def place_engines(train_tp: int, rollout_tp: int) -> EnginePlacement:
    """Collective over the default group: every rank calls it once, with the same sizes."""
    # Imported here: topology loads megatron-core, and the driver reads the layout types above before any launch.
    from parallel import topology

    world, rank = dist.get_world_size(), dist.get_rank()
    slots = engine_slots(world, train_tp, rollout_tp)
    slot = slots[rank]
    devices: list[int | None] = [None] * world
    # torchrun and Ray both give each process its GPU as LOCAL_RANK; SGLang wants the engine's as device indices.
    dist.all_gather_object(devices, int(os.environ.get("LOCAL_RANK", "0")))
    group = topology.process_group_of(slot.engine_ranks, (s.engine_ranks for s in slots), "gloo")
    return EnginePlacement(slot, slots, group, [devices[r] for r in slot.engine_ranks])
