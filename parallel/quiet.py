"""What megarl's processes keep off the console: library warnings a user cannot act on (the Transformer Engine and
Apex fallbacks that `accelerators_notice` sums up once, megatron's and torch's deprecations of calls megatron makes,
runpy's note on the processes a `python -m megarl.X` spawns)
and per-file progress bars of transformers and datasets. `MEGARL_VERBOSE=1` (`--verbose`) keeps everything, in
this process and in the processes it starts.

`quiet_libraries` runs when `parallel` or `megarl` is imported, so before megatron, transformers and datasets are:
in the driver, in every torchrun rank and in every Ray worker process (which imports `parallel.worker` first).
"""

from __future__ import annotations

import os
import warnings

VERBOSE = "MEGARL_VERBOSE"
NOISE = (
    (UserWarning, r"Transformer Engine and Apex are not installed"),
    (UserWarning, r"Apex is not installed"),
    (UserWarning, r"full scope is deprecated"),
    (FutureWarning, r"`torch\.distributed\.(reduce_scatter_tensor|all_gather_into_tensor)` is deprecated"),
    # megatron reads .grad of every parameter; on CPU (parallel/cpu_compat.py) they pass through a torch function mode
    (UserWarning, r"The \.grad attribute of a Tensor that is not a leaf Tensor is being accessed"),
    (UserWarning, r"TypedStorage is deprecated"),  # megatron's grad buffers call .storage()
    # megatron's checkpoint loading (a resume, `megarl export`) calls torch's deprecated DCP entry point and reads
    # torch ShardedTensors' attributes
    (FutureWarning, r"`load_state_dict` is deprecated and will be removed in future versions\. Please use `load`"),
    (FutureWarning, r"Please use DTensor instead and we are deprecating ShardedTensor"),
    # A process that `python -m megarl.X` starts with the spawn method (SGLang's schedulers) runs megarl.X as its
    # __mp_main__ with megarl.X already imported, and runpy warns of it: 8 lines in a run at TP 2.
    (RuntimeWarning, r"'megarl\.[\w.]+' found in sys\.modules after import of package 'megarl'"),
)
PROGRESS_BARS = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")


def quiet_libraries() -> None:
    if os.environ.get(VERBOSE):
        return
    for category, message in NOISE:
        warnings.filterwarnings("ignore", message=message, category=category)
    for variable in PROGRESS_BARS:
        os.environ.setdefault(variable, "1")


def be_verbose() -> None:
    """Undo `quiet_libraries` here and keep it off in the processes this one starts."""
    os.environ[VERBOSE] = "1"
    ours = {(category, message) for category, message in NOISE}
    warnings.filters[:] = [f for f in warnings.filters  # type: ignore[index]  # typeshed: a Sequence; it is a list
                           if not (f[0] == "ignore" and f[1] is not None and (f[2], f[1].pattern) in ours)]
    for variable in PROGRESS_BARS:
        if os.environ.get(variable) == "1":
            del os.environ[variable]


def accelerators_notice(installed: bool, asked: bool) -> str | None:
    """One line for a run without Transformer Engine, or with it `installed` and not `asked` for by any role's
    megatron.transformer_impl (None when it is used)."""
    if installed:
        if asked:
            return None
        return ("note: Transformer Engine is installed but not used: megarl runs its tested local layers "
                "(megatron.transformer_impl auto or local); set actor.megatron.transformer_impl=transformer_engine "
                "for TE's, not yet verified by megarl's GPU tests")
    return ("note: Transformer Engine and Apex are not installed: megatron runs its local layers (torch norms and "
            "attention, unfused kernels), slower on GPUs; `pip install -e \".[accel]\"` adds them where they build")
