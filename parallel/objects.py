"""Python objects as byte tensors, for process groups that carry tensors only (gloo's send/recv and broadcast)."""

from __future__ import annotations

import pickle
from typing import Any

import torch


def object_tensor(value: Any) -> torch.Tensor:
    """`value` pickled into a uint8 tensor (its own buffer: the tensor may be sent while the caller goes on)."""
    return torch.frombuffer(bytearray(pickle.dumps(value)), dtype=torch.uint8)


def tensor_object(payload: torch.Tensor) -> Any:
    """The object `object_tensor` encoded into `payload`."""
    return pickle.loads(payload.numpy().tobytes())
