"""`megarl plan`'s prediction for a measured run, phase by phase, as a `what: plan` row: the plan of the run's own
config (its model.path's config.json) against each phase's measured device-wide peak and the node's host peak."""

from __future__ import annotations

import datetime
from dataclasses import replace

from megarl.plan.calibration import GIB
from megarl.plan.inputs import plan_inputs
from megarl.plan.phases import plan_memory

RUN_KEYS = ("model_shape", "layers", "tp", "gpus_used", "offload", "lora_rank")  # copied from the measured row


def error(predicted: float, measured: float) -> float:
    return round((predicted - measured) / measured, 3)


def plan_row(cfg, measured: dict, gpu_gib: float, host_gib: float, shape: str | None = None,
             layers: int | None = None, micro_batches: dict[str, int] | None = None) -> dict:
    """`measured`: a `what: memory` row of benchmarks/rl_memory.py (its `memory_gb` in GB, ballast subtracted).
    `shape`, `layers`: plan that megarl.models.shapes shape instead of the config's model.path (which a replanned
    run's machine no longer holds). `micro_batches`: the run's largest micro-batch per phase, in tokens
    (benchmarks/plan_check.py --data): each phase is then also planned at it, beside the recipe's worst case."""
    inputs, source = plan_inputs(cfg, gpu_gib, host_gib, shape, layers)
    plan = plan_memory(inputs)
    phases = _phases(plan, measured)
    if micro_batches:
        at_run = _phases(plan_memory(replace(inputs, micro_batch_tokens=micro_batches)), measured)
        for name, phase in phases.items():
            phase["predicted_at_run_micro_batch_gib"] = at_run[name]["predicted_gib"]
            phase["error_at_run_micro_batch"] = at_run[name]["error"]
    host = {}
    if measured["memory_gb"].get("memory/host/peak_gb"):
        host_measured = measured["memory_gb"]["memory/host/peak_gb"] * 1e9 / GIB
        host = {"predicted_gib": round(plan.hosts[0].total / GIB, 2), "measured_gib": round(host_measured, 2),
                "error": error(plan.hosts[0].total / GIB, host_measured)}
    row = {"date": datetime.date.today().isoformat(), "commit": measured["commit"], "machine": measured["machine"],
           "what": "plan", "command": measured["command"] + "   (the plan of the run's own config, in the same script)",
           **{key: measured.get(key) for key in RUN_KEYS},  # rows older than a key lack it
           "measured_row": measured["label"], "plan_source": source, "gpu_gib": gpu_gib, "fits": plan.fits,
           "kv_cache_tokens": plan.kv_cache_tokens, "phases": phases, "host_node": host,
           "within_10_percent": all(abs(p["error"]) <= 0.10 for p in phases.values())}
    if micro_batches:
        row["run_micro_batch_tokens"] = micro_batches
        row["within_10_percent_at_run_micro_batches"] = all(abs(p["error_at_run_micro_batch"]) <= 0.10
                                                            for p in phases.values())
    return row


def _phases(plan, measured: dict) -> dict[str, dict]:
    """Each phase the run measured: the plan's figure beside the device-wide peak."""
    phases = {}
    for phase in plan.phases:
        key = f"memory/{phase.name}/peak_gb"
        if measured["memory_gb"].get(key):
            measured_gib = measured["memory_gb"][key] * 1e9 / GIB
            phases[phase.name] = {"predicted_gib": round(phase.total / GIB, 2), "measured_gib": round(measured_gib, 2),
                                  "error": error(phase.total / GIB, measured_gib)}
    return phases
