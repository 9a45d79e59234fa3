"""`megarl plan`: each phase's GPU memory peak and each node's host memory, predicted from a recipe and the model's
config.json, with the cheapest change that makes a run fit; `megarl train` runs the same check before any worker
starts. docs/memory.md describes the model.

Modules, one job each: inputs (what a plan is computed from), shape (parameter counts), tokens (micro-batch sizes),
activations, state (where weights, gradients and optimizer state are), phases (the per-GPU plan), update (an
update's peak: its backward or its optimizer step), host (per node),
result (the typed plan), advice (the cheapest fix), report (the table), calibration (every empirical constant),
machine (this machine's memory), command (the CLI), check (the launch check)."""

from megarl.plan.advice import Advice, cheapest_fix
from megarl.plan.calibration import Calibration
from megarl.plan.check import check_memory
from megarl.plan.inputs import PlanInputs, plan_inputs
from megarl.plan.phases import plan_memory
from megarl.plan.result import HostEstimate, MemoryPlan, PhaseEstimate
from megarl.plan.shape import ModelShape

__all__ = ["Advice", "Calibration", "HostEstimate", "MemoryPlan", "ModelShape", "PhaseEstimate", "PlanInputs",
           "cheapest_fix", "check_memory", "plan_inputs", "plan_memory"]
