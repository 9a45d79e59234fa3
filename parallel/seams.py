"""Every member of a library (torch, megatron-core, mbridge) that megarl replaces or overrides, in one place, with the
parameters megarl's replacement is written for. An upgrade that renames one or changes its parameters fails
tests/parallel/test_seams.py, not a training run.

- Replaced process-wide, only where megarl chooses to: `CPU_RUNS` by parallel/cpu_compat.py when a launcher runs
  megatron on CPU; `FALLBACKS` by megarl/models/fallbacks.py where neither Apex nor Transformer Engine is there.
- Overridden in a subclass, never patched: `BRIDGE_HOOKS`, mbridge's hooks that megarl/models/bridge.py's
  `MegarlBridge` implements.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Seam:
    owner: str  # a module, or a class as module.Class
    name: str
    parameters: tuple[str, ...]  # those of the library's member that megarl's stands in for

    def __str__(self) -> str:
        return f"{self.owner}.{self.name}"

    def resolve_owner(self) -> Any:
        parts = self.owner.split(".")
        for split in range(len(parts), 0, -1):
            try:
                owner = importlib.import_module(".".join(parts[:split]))
            except ImportError:
                continue
            for attribute in parts[split:]:
                owner = getattr(owner, attribute)
            return owner
        raise ImportError(f"{self.owner} does not import")

    def current(self) -> Any:
        """What the library holds there now (megarl's stand-in, once replaced)."""
        return getattr(self.resolve_owner(), self.name)

    def replace(self, value: Any) -> None:
        """Put megarl's stand-in where the library's member was (a process-wide change)."""
        setattr(self.resolve_owner(), self.name, value)

    def problem(self) -> str | None:
        """What no longer matches in the installed library (None: the seam is as megarl expects)."""
        try:
            member = self.current()
        except (ImportError, AttributeError) as e:
            return f"{self}: gone ({e})"
        found = tuple(inspect.signature(member).parameters)
        if found != self.parameters:
            return f"{self}: parameters {found}, megarl's stand-in is written for {self.parameters}"
        return None


CUDA_CURRENT_DEVICE = Seam("torch.cuda", "current_device", ())
CUDA_SYNCHRONIZE = Seam("torch.cuda", "synchronize", ("device",))
CUDA_EMPTY_CACHE = Seam("torch.cuda", "empty_cache", ())
CUDA_GET_RNG_STATE = Seam("torch.cuda", "get_rng_state", ("device",))
CUDA_SET_RNG_STATE = Seam("torch.cuda", "set_rng_state", ("new_state", "device"))
CUDA_MANUAL_SEED = Seam("torch.cuda", "manual_seed", ("seed",))
MEGATRON_GET_CUDA_RNG_STATE = Seam("megatron.core.tensor_parallel.random", "_get_cuda_rng_state",
                                   ("device", "clone", "graph_safe"))
MEGATRON_SET_CUDA_RNG_STATE = Seam("megatron.core.tensor_parallel.random", "_set_cuda_rng_state",
                                   ("new_state", "device", "graph_safe"))
MEGATRON_CLIP_GRADS = Seam("megatron.core.optimizer.optimizer", "clip_grad_by_total_norm_fp32",
                           ("parameters", "max_norm", "total_norm", "use_decoupled_grad"))
CPU_RUNS = (CUDA_CURRENT_DEVICE, CUDA_SYNCHRONIZE, CUDA_EMPTY_CACHE, CUDA_GET_RNG_STATE, CUDA_SET_RNG_STATE,
            CUDA_MANUAL_SEED, MEGATRON_GET_CUDA_RNG_STATE, MEGATRON_SET_CUDA_RNG_STATE, MEGATRON_CLIP_GRADS)

L2_NORM_FALLBACK = Seam("megatron.core.utils", "local_multi_tensor_l2_norm",
                        ("chunk_size", "noop_flag", "tensor_lists", "per_tensor", "args"))
L2_NORM_IMPL = Seam("megatron.core.optimizer.clip_grads", "l2_norm_impl",
                    ("chunk_size", "noop_flag", "tensor_lists", "per_tensor", "args"))


@dataclass(frozen=True)
class UndefinedName(Seam):
    """A name a library's module reads but defines only where an optional package imports; megarl defines it with
    the value the module's own code takes for "absent" (None)."""

    parameters: tuple[str, ...] = ()

    def missing(self) -> bool:
        return not hasattr(self.resolve_owner(), self.name)

    def problem(self) -> str | None:
        try:
            owner = self.resolve_owner()
        except ImportError as e:
            return f"{self}: gone ({e})"
        if hasattr(owner, self.name) or self.name in inspect.getsource(owner):
            return None  # defined (the optional package is there, or the library now defines it), or still read
        return f"{self}: no longer read by {self.owner}, so megarl need not define it"


# megatron-core's MoE router reads `te_general_gemm`, imported only with Transformer Engine (megatron-core 0.16).
MOE_TE_GEMM = UndefinedName("megatron.core.transformer.moe.moe_utils", "te_general_gemm")
FALLBACKS = (L2_NORM_FALLBACK, L2_NORM_IMPL, MOE_TE_GEMM)

BRIDGE_HOOKS = (
    Seam("mbridge.core.LLMBridge", "_adjust_mapping_for_shared_weights", ("self",)),
    Seam("mbridge.core.LLMBridge", "_get_transformer_layer_spec", ("self", "vp_stage")),
    Seam("mbridge.core.LLMBridge", "_weight_name_mapping_mcore_local_to_global", ("self", "model", "consider_ep")),
    Seam("mbridge.core.LLMBridge", "_weight_name_mapping_mcore_to_hf", ("self", "mcore_weights_name")),
    Seam("mbridge.core.LLMBridge", "_weight_to_hf_format", ("self", "mcore_weights_name", "mcore_weights")),
    Seam("mbridge.core.LLMBridge", "_get_safetensor_io", ("self", "weights_path")),
    Seam("mbridge.core.LLMBridge", "_get_actual_hf_path", ("self", "weight_path")),
    Seam("mbridge.core.safetensor_io.SafeTensorIO", "load_some_hf_weight", ("self", "hf_weight_names")),
    # Qwen3-MoE's config (megarl's own call of mbridge's base config builder) and its experts' export over EP
    Seam("mbridge.core.LLMBridge", "export_weights", ("self", "models")),
    Seam("mbridge.core.LLMBridge", "_build_config", ("self",)),
    Seam("mbridge.core.LLMBridge", "_build_base_config", ("self", "text_config_key", "kwargs")),
)

SEAMS = (*CPU_RUNS, *FALLBACKS, *BRIDGE_HOOKS)
