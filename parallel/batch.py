"""The one container a step's data travels in, between the driver and the workers and from stage to stage.

A `Batch` holds per-sample tensors (`tensors`, leading dimension = number of samples) and per-sample Python
values (`fields`: data_source, ground truth, uid, ... as numpy object arrays). Operations return new batches;
none modifies its input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import torch


def _object_array(values: Iterable) -> np.ndarray:
    values = list(values)
    array = np.empty(len(values), dtype=object)
    array[:] = values  # element-wise: lists stay lists instead of becoming a 2-D array
    return array


@dataclass
class Batch:
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)  # sequences, kept as numpy object arrays

    def __post_init__(self):
        self.fields = {
            k: v if isinstance(v, np.ndarray) and v.dtype == object and v.ndim == 1 else _object_array(v)
            for k, v in self.fields.items()
        }
        lengths = {k: v.shape[0] for k, v in self.tensors.items()} | {k: len(v) for k, v in self.fields.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"a Batch's entries must have one length per sample; got {lengths}")

    def __len__(self) -> int:
        for value in self.tensors.values():
            return value.shape[0]
        for value in self.fields.values():
            return len(value)
        return 0

    def __getitem__(self, key: str):
        if key in self.tensors:
            return self.tensors[key]
        if key in self.fields:
            return self.fields[key]
        raise KeyError(f"no {key!r} in this batch; it has {sorted(self.keys())}")

    def __contains__(self, key: str) -> bool:
        return key in self.tensors or key in self.fields

    def keys(self) -> list[str]:
        return [*self.tensors, *self.fields]

    def select(self, keys: Sequence[str] | None = None, indices=None) -> Batch:
        """The named columns (all when None) of the given rows (all when None; a list, slice or bool mask)."""
        if keys is not None:
            missing = [k for k in keys if k not in self]
            if missing:
                raise KeyError(f"no {missing} in this batch; it has {sorted(self.keys())}")
        tensors = {k: v for k, v in self.tensors.items() if keys is None or k in keys}
        fields = {k: v for k, v in self.fields.items() if keys is None or k in keys}
        if isinstance(indices, slice):
            # A copy of a basic slice: no gather op (each one cost milliseconds on a busy many-core host), and no view
            # that would pickle its whole source tensor when sent to a worker.
            tensors = {k: v[indices].clone() for k, v in tensors.items()}
            fields = {k: v[indices].copy() for k, v in fields.items()}
        elif indices is not None:
            if isinstance(indices, torch.Tensor):
                indices = indices.cpu().numpy()
            rows = np.arange(len(self))[indices]
            index = torch.as_tensor(rows, dtype=torch.long)
            tensors = {k: v[index.to(v.device)] for k, v in tensors.items()}
            fields = {k: v[rows] for k, v in fields.items()}
        return Batch(tensors, fields)

    def chunk(self, parts: int) -> list[Batch]:
        """`parts` consecutive batches of equal size."""
        if parts < 1 or len(self) % parts:
            raise ValueError(f"cannot split a batch of {len(self)} samples into {parts} equal parts")
        size = len(self) // parts
        return [self.select(indices=slice(i * size, (i + 1) * size)) for i in range(parts)]

    @staticmethod
    def concat(batches: Sequence[Batch]) -> Batch:
        """Rows of `batches` in order; they must have the same columns."""
        if not batches:
            raise ValueError("concat needs at least one batch")
        keys = sorted(batches[0].keys())
        for other in batches[1:]:
            if sorted(other.keys()) != keys:
                raise ValueError(f"cannot concat batches with different keys: {keys} vs {sorted(other.keys())}")
        tensors = {k: torch.cat([b.tensors[k] for b in batches]) for k in batches[0].tensors}
        fields = {k: np.concatenate([b.fields[k] for b in batches]) for k in batches[0].fields}
        return Batch(tensors, fields)

    def repeat(self, times: int, interleave: bool = True) -> Batch:
        """Each sample `times` times: a a b b (interleave, as rollout.n samples per prompt) or a b a b."""
        rows = np.repeat(np.arange(len(self)), times) if interleave else np.tile(np.arange(len(self)), times)
        return self.select(indices=rows)

    def union(self, other: Batch) -> Batch:
        """Columns of both; a key in both must hold equal values."""
        if self.keys() and other.keys() and len(self) != len(other):
            raise ValueError(f"cannot union batches of {len(self)} and {len(other)} samples")
        for key in set(self.tensors) & set(other.tensors):
            if not torch.equal(self.tensors[key], other.tensors[key]):
                raise ValueError(f"union: both batches have tensor {key!r}, with different values")
        for key in set(self.fields) & set(other.fields):
            if not np.array_equal(self.fields[key], other.fields[key]):
                raise ValueError(f"union: both batches have field {key!r}, with different values")
        return Batch({**self.tensors, **other.tensors}, {**self.fields, **other.fields})

    def to(self, device) -> Batch:
        return Batch({k: v.to(device) for k, v in self.tensors.items()}, dict(self.fields))
