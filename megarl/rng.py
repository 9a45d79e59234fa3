"""A process's random number generators as one JSON-able state, for checkpoints: Python's, numpy's, torch's CPU
generator, the current CUDA device's, and megatron's RNG tracker (the per-rank streams of tensor-parallel dropout
and initialisation) where one is set up."""

from __future__ import annotations

import random
import sys

import numpy as np
import torch

MEGATRON_RNG = "megatron.core.tensor_parallel.random"


def capture() -> dict:
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": [version, list(internal), gauss],
        "numpy": [name, keys.tolist(), pos, has_gauss, cached],
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state().tolist()
    tracker = _megatron_tracker()
    if tracker is not None and tracker.is_initialized():
        state["megatron"] = {name: s.tolist() for name, s in tracker.get_states().items()}
    return state


def restore(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(_bytes(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(_bytes(state["cuda"]))
    if state.get("megatron"):
        from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

        get_cuda_rng_tracker().set_states({name: _bytes(s) for name, s in state["megatron"].items()})


def _megatron_tracker():
    """Megatron's RNG tracker where this process loaded megatron (one that never did, the driver, has none set up, and
    importing megatron there costs seconds at every start)."""
    module = sys.modules.get(MEGATRON_RNG)
    return module.get_cuda_rng_tracker() if module is not None else None


def _bytes(values: list[int]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.uint8)
