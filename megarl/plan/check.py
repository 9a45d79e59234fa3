"""The launch check of `megarl train`: the same plan as `megarl plan`, run before any worker starts, refusing a
run that cannot fit with the plan's table, and warning of an update that fits by less than the plan's error in one."""

from __future__ import annotations

import sys

from megarl.config import ConfigError, MegaRLConfig
from megarl.plan.advice import cheapest_fix
from megarl.plan.inputs import plan_inputs
from megarl.plan.machine import host_memory_gib
from megarl.plan.phases import plan_memory
from megarl.plan.report import render, tight_warning


def check_memory(cfg: MegaRLConfig, gpu_gib: float | None, host_gib: float | None = None) -> None:
    """Raise ConfigError (with the table, the cheapest fix and how to skip the check) when a phase or a node's
    host memory does not fit. `gpu_gib` None (a machine without GPUs: CPU runs have no device memory to check) or
    trainer.memory_check=false: nothing is checked. `host_gib` None: this machine's memory."""
    if gpu_gib is None or not cfg.trainer.memory_check:
        return
    inputs, source = plan_inputs(cfg, gpu_gib, host_gib if host_gib is not None else host_memory_gib())
    plan = plan_memory(inputs)
    if plan.fits:
        shortfall = inputs.calibration.update_shortfall
        for line in tight_warning(plan.tight(shortfall), shortfall):
            print(f"memory plan: {line} (megarl plan shows the table)", file=sys.stderr)
        return
    table = render(inputs, plan, cheapest_fix(inputs), source)
    raise ConfigError(f"the run is predicted not to fit in memory:\n{table}\nset trainer.memory_check=false to "
                      "launch anyway (docs/memory.md says how the prediction is made)")
