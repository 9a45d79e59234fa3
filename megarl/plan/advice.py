"""The cheapest recipe change that makes a plan fit, searched in order of cost: the offloads (optimizer, then
gradients, then weights; a combination costs the sum, so single flags come before pairs), then a lower token budget
(or micro-batch size) for the phases that do not fit, with as few offloads as possible, then a larger tensor-parallel
size (the smallest that fits, within a node), with as few offloads as possible. Every change names its keys and
values, and every candidate must pass the recipe's own validation. The search first asks for room: every update
below its GPU's memory by the plan's largest measured error in an update (`Calibration.update_shortfall`), so that
the change is not itself a tight fit; only when no change leaves that room does it take one that merely fits."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterator

from megarl.config import ConfigError, validate_config
from megarl.config.moe_validate import expert_grid
from megarl.models.shapes import heads_split_problem
from megarl.plan.inputs import PlanInputs, get_key, override
from megarl.plan.phases import plan_memory
from megarl.plan.result import MemoryPlan, PhaseEstimate
from megarl.plan.tokens import BATCHING, budget_key

OFFLOADS = ("optimizer_offload", "grad_offload", "param_offload")  # cheapest first
BUDGET_STEP = 256  # a budget found is rounded down to a multiple of this many tokens

Changes = dict[str, Any]


@dataclass(frozen=True)
class Advice:
    changes: tuple[tuple[str, Any], ...]  # (dotted key, value)
    plan: MemoryPlan  # the plan with the changes

    @property
    def overrides(self) -> tuple[str, ...]:
        return tuple(override(key, value) for key, value in self.changes)


def cheapest_fix(inputs: PlanInputs) -> Advice | None:
    """None when no change tried fits."""
    for room in (inputs.calibration.update_shortfall, 0.0):
        for changes in _candidates(inputs, room):
            changed = inputs.with_changes(changes)
            plan = plan_memory(changed)
            if plan.fits and not plan.tight(room) and _valid(changed):
                return Advice(tuple(changes.items()), plan)
    return None


@dataclass(frozen=True)
class HostNeed:
    """Where no change fits a node's host memory: what every GPU phase fits with, and the host memory it needs."""

    advice: Advice | None  # the cheapest change that makes the GPUs fit (None: they fit as the recipe is)
    per_node: int  # bytes: the largest node's need with it


def host_need(inputs: PlanInputs) -> HostNeed | None:
    """The plan again with host memory unbounded (offloads trade GPU memory for host memory, so host memory can be
    what nothing else fits); None when even then no change fits the GPUs."""
    unbounded = replace(inputs, host_bytes=max(inputs.host_bytes, 1 << 60))
    plan = plan_memory(unbounded)
    advice = None if plan.fits else cheapest_fix(unbounded)
    if advice is None and not plan.fits:
        return None
    hosts = (advice.plan if advice else plan).hosts
    return HostNeed(advice, max(host.total for host in hosts))


def _candidates(inputs: PlanInputs, room: float) -> Iterator[Changes]:
    offloads = _offload_sets(inputs)
    yield from offloads[1:]
    for flags in offloads:
        budgets = _lower_budgets(inputs.with_changes(flags), room)
        if budgets:
            yield {**flags, **budgets}
    for tp_changes in _larger_tp(inputs):
        for flags in offloads:
            yield {**flags, **tp_changes}


def _offload_sets(inputs: PlanInputs) -> list[Changes]:
    """Offload flags not yet set, every combination, cheapest first (the empty one first), without repeats."""
    roles = ["actor", "critic"] if inputs.cfg.use_critic else ["actor"]
    sets: list[Changes] = []
    for mask in range(1 << len(OFFLOADS)):
        flags = [flag for bit, flag in enumerate(OFFLOADS) if mask >> bit & 1]
        keys = [f"{role}.megatron.{flag}" for flag in flags for role in roles]
        changes = {key: True for key in keys if not get_key(inputs.cfg, key)}
        if changes not in sets:
            sets.append(changes)
    return sets


def _lower_budgets(inputs: PlanInputs, room: float) -> Changes | None:
    """For every phase that does not fit, or is an update without `room` (a fraction of its GPU's memory left free),
    the largest budget with which it fits with that room; None when such a phase has no budget (gen, sync, host
    memory) or does not fit even with one sequence per micro-batch."""
    changes: Changes = {}
    plan = plan_memory(inputs)
    for estimate in (*plan.failing, *plan.tight(room)):
        if not isinstance(estimate, PhaseEstimate) or estimate.name not in BATCHING:
            return None
        key = budget_key(inputs, estimate.name)
        value = _largest_fitting(inputs, estimate, key, room)
        if value is None:
            return None
        changes[key] = value
    return changes


def _largest_fitting(inputs: PlanInputs, estimate: PhaseEstimate, key: str, room: float) -> int | None:
    def fits(value: int) -> bool:
        changed = inputs.with_changes({key: value})
        phase = plan_memory(changed).phase(estimate.name, estimate.pool)
        return phase.fits and not phase.tight(room) and _valid(changed)

    current = get_key(inputs.cfg, key)
    if key != BATCHING[estimate.name].tokens_key:  # a micro-batch size in samples: few values, each tried
        return next((size for size in range(current - 1, 0, -1) if fits(size)), None)
    low, high = inputs.sequence_tokens, current - 1  # below one sequence a budget changes nothing
    if high < low or not fits(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return max(inputs.sequence_tokens, low // BUDGET_STEP * BUDGET_STEP)


def _larger_tp(inputs: PlanInputs) -> Iterator[Changes]:
    """Multiples of the actor's TP up to a node's GPUs that split the model's heads (a multiple keeps every batch
    split valid) and leave room for its expert grid (EP × TP × PP ranks; the recipe's validation cannot check it
    without the model's config); a colocated critic shares the actor's mesh, so it follows."""
    cfg = inputs.cfg
    megatron, shape = cfg.actor.megatron, inputs.policy
    tp = megatron.tensor_model_parallel_size
    roles = ["actor", "critic"] if cfg.use_critic and not cfg.critic.enable_resource_pool else ["actor"]
    for larger in range(2 * tp, cfg.trainer.n_gpus_per_node + 1, tp):
        grid = expert_grid(replace(megatron, tensor_model_parallel_size=larger))
        if heads_split_problem(larger, shape.kv_heads, shape.heads) is None and cfg.world_size % grid == 0:
            yield {f"{role}.megatron.tensor_model_parallel_size": larger for role in roles}


def _valid(inputs: PlanInputs) -> bool:
    try:
        validate_config(inputs.cfg)
    except ConfigError:
        return False
    return True
