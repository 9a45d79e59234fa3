"""The memory plan as text: what was planned, a table of phases (GiB per GPU) and host memory (GiB per node) with
a verdict each, what does not fit and the cheapest change that makes it fit."""

from __future__ import annotations

from megarl.plan.advice import Advice, host_need
from megarl.plan.calibration import GIB
from megarl.plan.inputs import PlanInputs
from megarl.plan.result import HostEstimate, MemoryPlan, Parts, PhaseEstimate

SHOWN_PARTS = 3  # the largest parts named in each row


def render(inputs: PlanInputs, plan: MemoryPlan, advice: Advice | None, model: str) -> str:
    """`model` says where the model's shape came from (a config.json path, or a shape name)."""
    shortfall = inputs.calibration.update_shortfall
    tight = plan.tight(shortfall)
    return "\n".join([*_header(inputs, model), "", *_table(plan, tight), "",
                      *_verdict(inputs, plan, advice, shortfall), *tight_warning(tight, shortfall)])


def _header(inputs: PlanInputs, model: str) -> list[str]:
    cfg, shape, mesh = inputs.cfg, inputs.policy, inputs.mesh("actor")
    trainer, rollout = cfg.trainer, cfg.rollout
    per_gpu = _billions(shape.gpu_parameters(mesh.tp, mesh.pp, ep=mesh.ep))
    experts = (f", {shape.experts} experts ({shape.experts_per_token} per token, width {shape.expert_ffn})"
               if shape.is_moe else "")
    return [
        f"model: {model}: {shape.layers} layers, hidden {shape.hidden}, vocabulary {shape.vocab}{experts}, "
        + f"{_billions(shape.parameters)} parameters",
        f"layout: {trainer.nnodes} node(s) × {trainer.n_gpus_per_node} GPUs; actor TP {mesh.tp} PP {mesh.pp} "
        + f"CP {mesh.cp} DP {mesh.dp}{f' EP {mesh.ep}' if mesh.ep > 1 else ''} ({per_gpu} parameters per GPU); "
        + f"rollout TP {rollout.tensor_model_parallel_size}, "
        + f"engine share {rollout.gpu_memory_utilization}"
        + (f", on {cfg.rollout_world_size} GPUs of its own" if rollout.enable_resource_pool else ""),
        f"batch: {cfg.data.train_batch_size} prompts × {rollout.n} responses of {cfg.data.max_prompt_length} + "
        + f"{cfg.data.max_response_length} tokens; recompute {cfg.actor.megatron.recompute_granularity}",
        *_judge_line(inputs),
        f"memory: {inputs.gpu_bytes / GIB:.1f} GiB per GPU, {inputs.host_bytes / GIB:.1f} GiB per node",
    ]


def _judge_line(inputs: PlanInputs) -> list[str]:
    if inputs.judge is None:
        return []
    judge, cfg = inputs.cfg.reward.judge, inputs.cfg
    where = (f"on {cfg.judge_world_size} GPUs of its own" if judge.enable_resource_pool
             else "beside the actor, its KV cache released outside its pass")
    return [f"judge: {_billions(inputs.judge.parameters)} parameters, an engine of one GPU each, share "
            f"{judge.gpu_memory_utilization}, {where}"]


def _table(plan: MemoryPlan, tight: tuple[PhaseEstimate, ...]) -> list[str]:
    rows = [("phase", "GiB", "fits", "largest parts (GiB)")]
    for estimate in (*plan.phases, *plan.hosts):
        note = estimate.note if isinstance(estimate, PhaseEstimate) else ""
        verdict = "NO" if not estimate.fits else "tight" if estimate in tight else "yes"
        rows.append((_label(estimate), f"{estimate.total / GIB:.1f}", verdict, _largest(estimate.parts, note)))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return [f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip() for r in rows]


def _largest(parts: Parts, note: str) -> str:
    merged: dict[str, int] = {}
    for name, size in parts:
        merged[name] = merged.get(name, 0) + size
    largest = sorted(merged.items(), key=lambda item: -item[1])[:SHOWN_PARTS]
    text = ", ".join(f"{name} {size / GIB:.1f}" for name, size in largest)
    return f"{text}; {note}" if note else text


def _verdict(inputs: PlanInputs, plan: MemoryPlan, advice: Advice | None, shortfall: float) -> list[str]:
    if plan.fits:
        return ["fits: every phase on its GPUs and the host memory of every node"]
    lines = ["does not fit:"]
    for estimate in plan.failing:
        lines.append(f"  - {_shortfall(estimate)}")
    if advice is None:
        return lines + _host_limited(inputs)
    lines.append(f"cheapest change that fits: {' '.join(advice.overrides)}")
    tight = advice.plan.tight(shortfall)
    changed = [f"{_label(e)} {e.total / GIB:.1f} GiB{' (tight)' if e in tight else ''}"
               for e in (*advice.plan.phases, *advice.plan.hosts) if any(_label(f) == _label(e) for f in plan.failing)]
    lines.append(f"  with it: {', '.join(changed)}")
    return lines


def _host_limited(inputs: PlanInputs) -> list[str]:
    """No change fits: say whether host memory is what none fits, and how much a node needs."""
    need = host_need(inputs)
    if need is None:
        return ["no change tried fits (offloads, lower token budgets, a larger TP within a node): more GPUs or nodes, "
                "or ones with more memory"]
    gpus = (f"with {' '.join(need.advice.overrides)} every GPU phase fits" if need.advice
            else "every GPU phase fits as the recipe is")
    return [f"host memory is the limit: a node needs {need.per_node / GIB:.1f} GiB, more than its "
            f"{inputs.host_bytes / GIB:.1f} (--host-memory GiB plans a node of another size; by default this machine's)",
            f"  {gpus}"]


def tight_warning(tight: tuple[PhaseEstimate, ...], shortfall: float) -> list[str]:
    """A line naming the updates planned within the largest measured error of an update's plan of their GPU's
    memory; none when no update is."""
    if not tight:
        return []
    phases = ", ".join(f"{_label(e)} {e.total / GIB:.1f} of {e.limit / GIB:.1f} GiB" for e in tight)
    return [f"tight: {phases}: within {shortfall * 100:.0f} % of the GPU's memory, the largest error of an update's "
            "plan measured so far (docs/memory.md), so it may not fit; a lower token budget or an offload leaves room"]


def _label(estimate: PhaseEstimate | HostEstimate) -> str:
    if isinstance(estimate, HostEstimate):
        return "host/node" if estimate.pool == "trainer" else f"host/node ({estimate.pool})"
    return estimate.name if estimate.pool == "trainer" else f"{estimate.name} ({estimate.pool} GPUs)"


def _shortfall(estimate: PhaseEstimate | HostEstimate) -> str:
    if isinstance(estimate, PhaseEstimate) and estimate.problem:
        return f"{_label(estimate)}: {estimate.problem}"
    return f"{_label(estimate)} needs {estimate.total / GIB:.1f} GiB of {estimate.limit / GIB:.1f}"


def _billions(count: int) -> str:
    return f"{count / 1e9:.2f}B"
