"""LoRA on megatron-core's tensor-parallel linear layers, declared through the layer spec (`lora_layer_spec`).

No maintained LoRA for megatron-core installs here: Megatron-Bridge's PEFT needs Transformer Engine (and
transformers < 5), and HF PEFT wraps `torch.nn.Linear`, not megatron's parallel layers. So the adapters are
subclasses of megatron's own `ColumnParallelLinear` / `RowParallelLinear` that add `lora_A` [r, in] and `lora_B`
[out, r] beside the frozen `weight`, output `base(x) + alpha/r · B A dropout(x)`. Parameter names stay megatron's
(the base weight is still `...linear_qkv.weight`), so HF loading and the weight sync see the layers they know.

The adapters are sharded like their base layer, and need no communication of their own beyond what megatron's
mappings do in autograd:
- column-parallel base (qkv, fc1: output rows split): B is split on its rows like the weight, A is whole on every
  rank; A's output passes `copy_to_tensor_model_parallel_region` (identity forward, all-reduce backward), so every
  rank gets A's full gradient.
- row-parallel base (proj, fc2: input columns split): A is split on its columns like the weight, its partial output
  is summed by `reduce_from_tensor_model_parallel_region`; B is whole on every rank.
So the merged weight W + s·B A of a rank's shard is computed from that rank's tensors alone (`merged_weight`).
"""

from __future__ import annotations

import math
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Iterator

import torch
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes
from megatron.core.tensor_parallel.mappings import (
    copy_to_tensor_model_parallel_region,
    reduce_from_tensor_model_parallel_region,
)
from megatron.core.transformer.mlp import apply_swiglu_sharded_factory
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_block import TransformerBlockSubmodules
from megatron.core.transformer.utils import make_sharded_tensors_for_checkpoint

ADAPTER_NAMES = ("lora_A", "lora_B")


@dataclass(frozen=True)
class Adapter:
    """One LoRA layer's settings (from `actor.lora`)."""

    rank: int
    alpha: float
    dropout: float

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank


def is_adapter(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in ADAPTER_NAMES


class _LoRA:
    """What both adapter layers share; `split_dim` is the dim of A (1) or B (0) that tensor parallelism splits."""

    adapters_enabled = True

    def _add_adapters(self, adapter: Adapter, in_features: int, out_features: int, params_dtype, device):
        self.adapter = adapter
        self.lora_dropout = torch.nn.Dropout(adapter.dropout) if adapter.dropout > 0 else torch.nn.Identity()
        self.lora_A = torch.nn.Parameter(torch.zeros(adapter.rank, in_features, dtype=params_dtype, device=device))
        self.lora_B = torch.nn.Parameter(torch.zeros(out_features, adapter.rank, dtype=params_dtype, device=device))
        sharded = self.lora_B if self.split_dim == 0 else self.lora_A
        set_tensor_model_parallel_attributes(sharded, is_parallel=True, dim=self.split_dim, stride=1)

    def _adapted(self, output: torch.Tensor, input_: torch.Tensor, combine) -> torch.Tensor:
        """`output` plus the adapter's s·B A dropout(x); `combine` is the tensor-parallel mapping of A's output."""
        if not self.adapters_enabled:
            return output
        hidden = combine(F.linear(self.lora_dropout(input_), self.lora_A), group=self.tp_group)
        return output + self.adapter.scaling * F.linear(hidden, self.lora_B)

    def merged_weight(self) -> torch.Tensor:
        """This rank's shard of W + s·B A (a new tensor: the weight itself is never changed)."""
        delta = self.lora_B.float() @ self.lora_A.float()
        return (self.weight.float() + self.adapter.scaling * delta).to(self.weight.dtype)

    def full_shape(self, name: str) -> tuple[int, ...]:
        """The shape of adapter `name` across all tensor-parallel ranks."""
        shape = list(getattr(self, name).shape)
        if (name == "lora_B") == (self.split_dim == 0):
            shape[self.split_dim] *= parallel_state.get_tensor_model_parallel_world_size()
        return tuple(shape)

    def local_part(self, name: str, full: torch.Tensor) -> torch.Tensor:
        """This rank's part of a whole adapter tensor (`full_shape`, laid out as at one rank: fc1's B is [gate; up],
        and a rank's part holds its share of each, as its weight does)."""
        if (name == "lora_B") != (self.split_dim == 0):
            return full
        size, rank = parallel_state.get_tensor_model_parallel_world_size(), parallel_state.get_tensor_model_parallel_rank()
        halves = full.chunk(2, dim=0) if getattr(self, "gated", False) else (full,)
        return torch.cat([half.chunk(size, dim=self.split_dim)[rank] for half in halves], dim=self.split_dim)

    def _adapter_axes(self) -> dict[str, int]:
        return {"lora_B": 0} if self.split_dim == 0 else {"lora_A": 1}


class LoRAColumnParallelLinear(_LoRA, ColumnParallelLinear):
    """A column-parallel layer (qkv, fc1) with a LoRA adapter; `gated`: fc1's fused [gate; up] rows."""

    split_dim = 0

    def __init__(self, input_size, output_size, *, adapter: Adapter, gated: bool = False, **kwargs):
        super().__init__(input_size, output_size, **kwargs)
        if self.gather_output:
            raise ValueError("LoRA on a column-parallel layer that gathers its output is not supported")
        self.gated = gated
        self._add_adapters(adapter, input_size, self.output_size_per_partition, kwargs["config"].params_dtype,
                           self.weight.device)

    def forward(self, input_, weight=None, runtime_gather_output=None):
        output, bias = super().forward(input_, weight, runtime_gather_output)
        return self._adapted(output, input_, copy_to_tensor_model_parallel_region), bias

    def sharded_state_dict(self, prefix="", sharded_offsets=(), metadata=None):
        state = make_sharded_tensors_for_checkpoint(
            self.state_dict(prefix="", keep_vars=True), prefix, {"weight": 0, "bias": 0, **self._adapter_axes()},
            sharded_offsets, tp_group=self.tp_group, dp_cp_group=metadata["dp_cp_group"])
        if self.gated:  # megatron's MLP splits the fused weight into gate and up; B's rows are laid out alike
            key = f"{prefix}lora_B"
            state[key] = apply_swiglu_sharded_factory(state[key], sharded_offsets,
                                                      (metadata or {}).get("singleton_local_shards", False))
        return state


class LoRARowParallelLinear(_LoRA, RowParallelLinear):
    """A row-parallel layer (proj, fc2) with a LoRA adapter."""

    split_dim = 1

    def __init__(self, input_size, output_size, *, adapter: Adapter, **kwargs):
        super().__init__(input_size, output_size, **kwargs)
        self._add_adapters(adapter, self.input_size_per_partition, output_size, kwargs["config"].params_dtype,
                           self.weight.device)

    def forward(self, input_):
        output, bias = super().forward(input_)
        return self._adapted(output, input_, reduce_from_tensor_model_parallel_region), bias

    def sharded_state_dict(self, prefix="", sharded_offsets=(), metadata=None):
        return make_sharded_tensors_for_checkpoint(
            self.state_dict(prefix="", keep_vars=True), prefix, {"weight": 1, **self._adapter_axes()},
            sharded_offsets, tp_group=self.tp_group, dp_cp_group=metadata["dp_cp_group"])


def lora_layer_spec(block: TransformerBlockSubmodules, adapter: Adapter, targets, gated: bool):
    """The block spec with each target linear layer swapped for its LoRA subclass."""
    return replace(block, layer_specs=[_with_adapters(layer, adapter, set(targets), gated)
                                       for layer in block.layer_specs])


def _with_adapters(layer: ModuleSpec, adapter: Adapter, targets: set[str], gated: bool) -> ModuleSpec:
    attention, mlp = layer.submodules.self_attention, layer.submodules.mlp
    swaps = {"linear_qkv": (LoRAColumnParallelLinear, {}), "linear_proj": (LoRARowParallelLinear, {}),
             "linear_fc1": (LoRAColumnParallelLinear, {"gated": gated}), "linear_fc2": (LoRARowParallelLinear, {})}

    def swapped(submodules):
        changes = {name: ModuleSpec(module=cls, params={"adapter": adapter, **extra})
                   for name, (cls, extra) in swaps.items() if name in targets and hasattr(submodules, name)}
        return replace(submodules, **changes)

    attention = replace(attention, submodules=swapped(attention.submodules))
    mlp = replace(mlp, submodules=swapped(mlp.submodules))
    return replace(layer, submodules=replace(layer.submodules, self_attention=attention, mlp=mlp))


def adapter_layers(module: torch.nn.Module) -> Iterator[tuple[str, _LoRA]]:
    for name, child in module.named_modules():
        if isinstance(child, _LoRA):
            yield name, child


def freeze_base(module: torch.nn.Module, **_) -> None:
    """A model-creation callback of mbridge (which passes the stage's keywords): only the adapters train: megatron's DDP then gives gradient buffers, and the optimizer state, to them alone."""
    for name, param in module.named_parameters():
        param.requires_grad_(is_adapter(name))


@contextmanager
def adapters_disabled(chunks: list):
    """The base model (the reference policy of a LoRA actor): the adapters' contribution left out."""
    layers = [layer for chunk in chunks for _, layer in adapter_layers(chunk)]
    for layer in layers:
        layer.adapters_enabled = False
    try:
        yield
    finally:
        for layer in layers:
            layer.adapters_enabled = True


def init_adapters(named_layers: Iterator[tuple[str, _LoRA]], seed: int) -> None:
    """A as PEFT draws it (Kaiming-uniform, bound 1/√in) and B zero, so that training starts from the base model.
    A is drawn whole from a generator seeded by the seed and the layer's global name, then cut to this rank's part:
    the same adapters in every parallel layout."""
    for name, layer in named_layers:
        generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
        full = layer.full_shape("lora_A")
        bound = 1.0 / math.sqrt(full[1])
        values = torch.empty(full).uniform_(-bound, bound, generator=generator)
        with torch.no_grad():
            layer.lora_A.copy_(layer.local_part("lora_A", values))
            layer.lora_B.zero_()
