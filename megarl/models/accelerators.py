"""Which optional accelerators are installed (used when present, never required), and the kernels torch.compile
fuses on a GPU."""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from typing import Callable

import torch


TRANSFORMER_IMPLS = ("auto", "local", "transformer_engine")


@functools.cache  # asked per packed micro-batch; the answer cannot change within a process
def transformer_engine_available() -> bool:
    return importlib.util.find_spec("transformer_engine") is not None


def moe_token_dispatcher() -> str:
    """megatron's token dispatcher for a mixture-of-experts layer: all-to-all on GPUs; on CPU all-gather (megatron's
    all-to-all one makes a CUDA stream when it is built), which needs as many tokens on every rank of its tensor ×
    expert-parallel group (megarl/models/packing.py pads to that)."""
    return "alltoall" if torch.cuda.is_available() else "allgather"


def uses_transformer_engine(transformer_impl: str) -> bool:
    """Whether a role's `megatron.transformer_impl` builds Transformer Engine's layers: only when it names them.
    `auto` is the local spec wherever TE is installed too: the faster of the two at every size measured."""
    if transformer_impl not in TRANSFORMER_IMPLS:
        raise ValueError(f"transformer_impl={transformer_impl!r} is not one of {', '.join(TRANSFORMER_IMPLS)}")
    if transformer_impl == "transformer_engine" and not transformer_engine_available():
        raise ValueError("transformer_impl=transformer_engine needs Transformer Engine, which is not importable here")
    return transformer_impl == "transformer_engine"


def layers_name(transformer_impl: str) -> str:
    """The layers a `megatron.transformer_impl` builds, as result rows name them (`model_path`)."""
    if uses_transformer_engine(transformer_impl):
        return "megatron-core, Transformer Engine layers"
    return "megatron-core, local layers"


def transformer_engine_asked(config) -> bool:
    """Whether any megatron section of a recipe's config (a dataclass tree; RL, SFT or reward-model) asks for
    Transformer Engine's layers."""
    if not dataclasses.is_dataclass(config):
        return False
    if hasattr(config, "transformer_impl"):
        return config.transformer_impl == "transformer_engine"
    return any(transformer_engine_asked(getattr(config, f.name)) for f in dataclasses.fields(config))


class CompiledOnGPU:
    """`fn` as it is on CPU, torch.compile'd on a GPU: elementwise ops that eagerly stream float32 temporaries through
    memory one by one become one kernel. Compiled lazily, on the first GPU call, with dynamic shapes, so micro-batches
    of any token count share the kernel. `eager` and `compiled` name either version for a caller that chooses."""

    def __init__(self, fn: Callable):
        self.eager, self.compiled = fn, torch.compile(fn, dynamic=True)

    def __call__(self, tensor: torch.Tensor, *args):
        return (self.compiled if tensor.is_cuda else self.eager)(tensor, *args)
