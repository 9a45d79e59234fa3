"""Where a role's weights and gradients live between its calls, so that a colocated rollout engine can have the GPU
during generation (verl's `param_offload` / `grad_offload`).

- Trained roles (megatron DDP chunks): the parameter buffers move to pinned host memory that megatron allocates once
  and reuses (`_ParamAndGradBuffer.offload_to_cpu` / `reload_from_cpu`); the gradient buffers are freed and come
  back zeroed (`DistributedDataParallel.offload_grad_buffers` / `restore_grad_buffers`) — the next update zeroes
  them anyway, so copying them out would only cost time.
- Frozen roles (the reference): each tensor gets one pinned host copy, made once; offloading points the tensor at
  it again (frozen weights never change, so nothing is copied back).

Optimizer state is not moved here: with `optimizer_offload` megatron's hybrid optimizer keeps the fp32 master weights
and Adam moments in host memory and steps there (megarl/models/training.py).

On a machine without CUDA the weights already live in host memory: moving them is a no-op there, while freeing the
gradient buffers still frees them.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch


def hand_back_cached_blocks() -> None:
    """Before weights or gradient buffers come back: placed in a block the previous pass left cached they would split
    it, and the next pass, shaped like that one, would find no block large enough and reserve its largest tensors
    afresh (a second logits-sized block: docs/benchmarks.md). A no-op without CUDA."""
    torch.cuda.empty_cache()


@dataclass(frozen=True)
class Residency:
    """What leaves the GPU while the role is not in one of its own calls."""

    params: bool = False
    grads: bool = False


class _Weights:
    """What both kinds share: the weights visit the GPU for a call and leave afterwards when the residency says so."""

    residency: Residency

    def offload_params(self) -> None:
        raise NotImplementedError

    def onload_params(self) -> None:
        raise NotImplementedError

    @contextmanager
    def weights_in_use(self):
        """The weights on the GPU for one call; afterwards they leave again if the residency says so."""
        self.onload_params()
        try:
            yield
        finally:
            if self.residency.params:
                self.offload_params()

    def settle(self) -> None:
        """Apply the residency now: after building, before the engine starts, so that the engine sizes its KV cache
        against what the trainer holds while it generates."""
        if self.residency.params:
            self.offload_params()


class TrainedState(_Weights):
    """The parameter and gradient buffers of DDP-wrapped megatron chunks."""

    def __init__(self, chunks: list, residency: Residency):
        self.chunks, self.residency = chunks, residency
        self.params_on_device = self.grads_on_device = True
        self.updating = False

    def _buffers(self):
        for chunk in self.chunks:
            yield from chunk.buffers + chunk.expert_parallel_buffers

    def offload_params(self) -> None:
        if self.params_on_device and torch.cuda.is_available():
            torch.cuda.synchronize()  # the copy to host is asynchronous; work still queued may read the buffers
            for buffer in self._buffers():
                buffer.offload_to_cpu(move_params=True, move_grads=False)
            torch.cuda.empty_cache()  # cached blocks would stay unusable to the engine's own allocator
        self.params_on_device = False

    def onload_params(self) -> None:
        if not self.params_on_device and torch.cuda.is_available():
            hand_back_cached_blocks()
            for buffer in self._buffers():
                buffer.reload_from_cpu(move_params=True, move_grads=False)
            torch.cuda.synchronize()
        self.params_on_device = True

    def free_grads(self) -> None:
        if self.grads_on_device:
            for chunk in self.chunks:
                chunk.offload_grad_buffers(synchronize=True, empty_cache=True)
        self.grads_on_device = False

    def restore_grads(self) -> None:
        if not self.grads_on_device:
            hand_back_cached_blocks()
            for chunk in self.chunks:
                chunk.restore_grad_buffers(synchronize=True)
        self.grads_on_device = True

    @contextmanager
    def update_in_use(self):
        """Weights and gradient buffers on the GPU for one update. Nested (an update of several optimizer steps
        around each step's own), only the outermost moves anything: between its steps the offloads would move the
        state out and back, and the cache emptied after each step made the next allocate its blocks afresh (in a
        profile of the 0.5B PPO recipe's updates of two steps, one H100, cudaFree and cudaMalloc took 114 of
        update_actor's 749 ms and 127 of update_critic's 539 ms, about half of it after the first step)."""
        if self.updating:
            yield
            return
        self.updating = True
        try:
            with self._update_in_use():
                yield
        finally:
            self.updating = False

    @contextmanager
    def _update_in_use(self):
        with self.weights_in_use():
            self.restore_grads()
            try:
                yield
            finally:
                if self.residency.grads:
                    self.free_grads()  # it empties the cache itself
                elif torch.cuda.is_available():
                    # The update's activations and logits would otherwise stay cached into the next phase (until
                    # the sync's own release), which then peaks as high as the update (docs/benchmarks.md).
                    torch.cuda.empty_cache()

    def settle(self) -> None:
        if self.residency.grads:
            self.free_grads()
        super().settle()


class FrozenState(_Weights):
    """The weights (and buffers) of untrained chunks; with `residency.params` in pinned host memory outside the
    role's calls."""

    def __init__(self, chunks: list, residency: Residency):
        self.residency = residency
        self.tensors = [t for chunk in chunks for t in (*chunk.parameters(), *chunk.buffers())]
        self.host: list[torch.Tensor] | None = None
        self.params_on_device = True

    def offload_params(self) -> None:
        if self.params_on_device and torch.cuda.is_available():
            if self.host is None:
                self.host = [t.data.to("cpu").pin_memory() for t in self.tensors]
            for tensor, host in zip(self.tensors, self.host):
                tensor.data = host
            torch.cuda.empty_cache()
        self.params_on_device = False

    def onload_params(self) -> None:
        if not self.params_on_device and torch.cuda.is_available() and self.host is not None:
            hand_back_cached_blocks()
            device = torch.device("cuda", torch.cuda.current_device())
            for tensor, host in zip(self.tensors, self.host):
                tensor.data = host.to(device, non_blocking=True)
            torch.cuda.synchronize()
        self.params_on_device = True
