"""Which optional accelerators are installed (used when present, never required), and the kernels torch.compile
fuses on a GPU."""

from __future__ import annotations

import functools
import importlib.util
from typing import Callable

import torch


@functools.cache  # asked per packed micro-batch; the answer cannot change within a process
def transformer_engine_available() -> bool:
    return importlib.util.find_spec("transformer_engine") is not None


class CompiledOnGPU:
    """`fn` as it is on CPU, torch.compile'd on a GPU: elementwise ops that eagerly stream float32 temporaries through
    memory one by one become one kernel. Compiled lazily, on the first GPU call, with dynamic shapes, so micro-batches
    of any token count share the kernel. `eager` and `compiled` name either version for a caller that chooses."""

    def __init__(self, fn: Callable):
        self.eager, self.compiled = fn, torch.compile(fn, dynamic=True)

    def __call__(self, tensor: torch.Tensor, *args):
        return (self.compiled if tensor.is_cuda else self.eager)(tensor, *args)
