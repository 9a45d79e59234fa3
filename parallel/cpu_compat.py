"""Run megatron-core on CPU processes (gloo), for tests and CI. Inert on machines with CUDA.

megatron-core calls CUDA in many places even for CPU tensors. `enable()` makes those calls CPU-safe:
- `torch.cuda.current_device/synchronize/empty_cache` and the CUDA RNG get/set/seed used by megatron's
  RNG tracker map to the CPU equivalents (the tracker's forked streams still work, on the CPU generator);
- a TorchFunctionMode rewrites device="cuda"/cuda:N/int devices and `.cuda()` to the CPU for the factory
  calls megatron hard-codes (schedules, masks, optimizer buffers);
- megatron's optimizers branch on `tensor.type()` strings such as 'torch.cuda.BFloat16Tensor'; the CPU
  names get the `cuda.` prefix, with the dtype part unchanged, so the dtype branches stay exact;
- megatron's grad-clip scaling asserts CUDA float grads; it is replaced by the same scaling in plain torch.
Everything is process-global and idempotent; on a CUDA machine `enable()` does nothing, so GPU behaviour
never changes. It is switched on where a run is placed on CPU (`WorkerHost.join`, told so by the launcher), never
by megarl's own initialisation; what it replaces is listed in parallel/seams.py (`CPU_RUNS`).
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from parallel import seams

_enabled = False


def _is_cuda_device(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, int) and not isinstance(device, bool)


class _CudaToCpu(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in (torch.Tensor.cuda,):
            return args[0]
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            name = func(*args)
            return name.replace("torch.", "torch.cuda.", 1) if ".cuda." not in name else name
        if _is_cuda_device(kwargs.get("device")):
            kwargs["device"] = "cpu"
        if func in (torch.Tensor.to,) and len(args) > 1 and _is_cuda_device(args[1]):
            args = (args[0], "cpu", *args[2:])
        return func(*args, **kwargs)


def _clip_grads_cpu(parameters, max_norm, total_norm, use_decoupled_grad=False):
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    clip_coeff = max_norm / (total_norm + 1.0e-6)
    if clip_coeff < 1.0:
        for param in parameters:
            grad = param.decoupled_grad if use_decoupled_grad else param.grad
            if grad is not None:
                grad.detach().mul_(clip_coeff)


def enable() -> bool:
    """Make megatron-core runnable on CPU; returns whether the shim is active (False where CUDA exists)."""
    global _enabled
    if torch.cuda.is_available():
        return False
    if _enabled:
        return True
    seams.CUDA_CURRENT_DEVICE.replace(lambda: "cpu")
    seams.CUDA_SYNCHRONIZE.replace(lambda *a, **k: None)
    seams.CUDA_EMPTY_CACHE.replace(lambda: None)
    seams.CUDA_GET_RNG_STATE.replace(lambda *a, **k: torch.get_rng_state())
    seams.CUDA_SET_RNG_STATE.replace(lambda state, *a, **k: torch.set_rng_state(state))
    seams.CUDA_MANUAL_SEED.replace(lambda seed: torch.manual_seed(seed))
    seams.MEGATRON_GET_CUDA_RNG_STATE.replace(lambda *a, **k: torch.get_rng_state())
    seams.MEGATRON_SET_CUDA_RNG_STATE.replace(lambda state, *a, **k: torch.set_rng_state(state))
    seams.MEGATRON_CLIP_GRADS.replace(_clip_grads_cpu)
    _CudaToCpu().__enter__()
    _enabled = True
    return True
