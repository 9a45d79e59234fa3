"""The judge's engine (`reward.judge`, megarl/workers/judge.py): one engine of one GPU per process, serving a
checkpoint of its own, planned by the rule megarl/plan/phases.py applies to the rollout engine.

Beside the actor it starts before the rollout engine and releases its KV cache at once: its weights and the released
engine's footprint stay in every phase (and are gone from what the rollout engine finds free when it starts), and
its KV cache comes back for the judge's pass, which runs while the rollout engine still holds its own (within
generation where it judges each response as it finishes, MegaRLConfig.judge_streams). On GPUs of its own
(`reward.judge.enable_resource_pool`) it shares its GPU with its worker process alone and keeps its KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from megarl.plan.calibration import GIB, gib
from megarl.plan.inputs import PlanInputs
from megarl.plan.result import Parts, PhaseEstimate

JUDGE_POOL = "judge"


@dataclass(frozen=True)
class JudgeEngine:
    free_at_start: int  # what was free on its GPU when it started
    weights: int
    kv_cache: int  # may be negative: its share does not even hold its weights
    released: int  # the engine process's bytes with its KV cache released
    own_pool: bool

    @property
    def held(self) -> Parts:
        """What it keeps on a GPU it shares with the actor, outside its pass."""
        return () if self.own_pool else (("judge weights", self.weights), ("released judge engine", self.released))


def judge_engine(inputs: PlanInputs, resident: Parts) -> JudgeEngine | None:
    """The recipe's judge engine (None without a judge); `resident`: the trainer's bytes on the GPU when it starts
    (none on a pool of its own)."""
    if inputs.judge is None:
        return None
    cfg = inputs.cfg
    own_pool = cfg.reward.judge.enable_resource_pool
    free = inputs.free_at_engine_start(cfg.judge_world_size if own_pool else cfg.world_size, resident)
    share = int(cfg.reward.judge.gpu_memory_utilization * max(free, 0))
    weights = 2 * inputs.judge.parameters
    return JudgeEngine(free, weights, share - weights, inputs.calibration.released_engine(1), own_pool)


def judge_phase(inputs: PlanInputs, judge: JudgeEngine, held: Parts, name: str = "judge") -> PhaseEstimate:
    """The judge's pass: `held`, what else is on the GPU then (beside the actor: the generation phase's parts, its
    own weights among them; on its own pool: its worker process), with its KV cache and runtime added. `name`: the
    phase it runs in (`gen` where it judges as responses finish)."""
    cal = inputs.calibration
    parts = held + (() if not judge.own_pool else (("judge weights", judge.weights),))
    parts += (("judge KV cache", max(judge.kv_cache, 0)), ("judge runtime", gib(cal.engine_runtime_gib)))
    tokens = max(judge.kv_cache, 0) // inputs.judge.kv_cache_bytes_per_token(1)
    problem = None
    if judge.free_at_start > 0 and tokens < inputs.sequence_tokens:
        problem = (f"the judge's share, reward.judge.gpu_memory_utilization="
                   f"{inputs.cfg.reward.judge.gpu_memory_utilization} of the {judge.free_at_start / GIB:.1f} GiB "
                   f"free when it starts, holds {tokens} KV-cache tokens beside its weights, fewer than one "
                   f"policy sequence ({inputs.sequence_tokens}) it reads")
    pool = JUDGE_POOL if judge.own_pool else "trainer"
    return PhaseEstimate(name, pool, parts, inputs.gpu_bytes, note=f"judge KV cache {tokens:,} tokens",
                         problem=problem)


def judge_host(inputs: PlanInputs, judge: JudgeEngine | None) -> Parts:
    """The judge's scheduler processes on a node of the actor's pool (its own pool's are planned apart)."""
    if judge is None or judge.own_pool:
        return ()
    return (("judge engine processes", inputs.cfg.trainer.n_gpus_per_node * gib(inputs.calibration.host_engine_gib)),)
