"""Each phase's peak on the fullest GPU, device-wide: the trainer's worker process (every colocated role) and the
SGLang scheduler process of the GPU's engine rank.

- gen: the engine holds its static share. SGLang's rule (`profile_max_num_token` in
  python/sglang/srt/model_executor/model_runner.py, model_runner_kv_cache_mixin.py in recent versions): the KV pool
  gets `free_after_load − free_at_start × (1 − mem_fraction_static)` bytes, free memory measured when the engine
  starts (after the roles are built and their offloads applied) and after it loads its weights; so its weights and
  KV cache together take mem_fraction_static of what the trainer's process and the engine's context left free, and
  memory the trainer frees before the engine starts goes to the KV cache in that proportion. The trainer's resident
  state stays; the engine's runtime memory comes on top (in the 1 − fraction it leaves).
- old_log_prob / ref / values: one forward micro-batch (one layer's activations; the log-prob passes add the
  logits in bf16 and fp32 and the log-prob function's chunks); the reference's weights visit the GPU for its pass.
- update_actor / update_critic: weights, gradients and (unless offloaded) optimizer state, and the larger of the
  backward's tensors with the allocator's cache and the optimizer step's temporaries (megarl/plan/update.py).
- sync: the engine's weights resumed and filled bucket by bucket while the actor's weights are on the GPU; then the
  KV cache resumes (the larger of the two moments counts).
Every phase also holds the trainer process's memory outside torch's allocator and what the released engine keeps.
With `rollout.enable_resource_pool` the engines have GPUs of their own ("rollout" phases: gen, and sync while the
weights arrive); the trainer's GPUs then hold no engine and have no gen phase.
- judge (with `reward.judge`): the judge engine's pass, megarl/plan/judge.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from megarl.plan.activations import forward_bytes, logits_bytes
from megarl.plan.calibration import GIB, gib
from megarl.plan.host import host_estimates
from megarl.plan.inputs import PlanInputs
from megarl.plan.judge import JudgeEngine, judge_engine, judge_phase
from megarl.plan.result import MemoryPlan, Parts, PhaseEstimate
from megarl.plan.state import RoleState, role_states
from megarl.plan.tokens import micro_batch_tokens
from megarl.plan.update import update_estimate

STEP_ORDER = ("gen", "judge", "old_log_prob", "ref", "values", "update_critic", "update_actor", "sync")
UPDATED = {"update_actor": "actor", "update_critic": "critic"}  # an update's phase: the role it trains


@dataclass(frozen=True)
class Engine:
    """One GPU's engine rank while generating."""

    free_at_start: int  # what the trainer left free when the engine started
    weights: int
    kv_cache: int  # may be negative: the share does not even hold the weights
    kv_cache_tokens: int


def plan_memory(inputs: PlanInputs) -> MemoryPlan:
    states = role_states(inputs)
    colocated_critic = "critic" in states and not inputs.cfg.critic.enable_resource_pool
    trainer_roles = tuple(s for name, s in states.items() if name != "critic" or colocated_critic)
    own_rollout = inputs.cfg.rollout.enable_resource_pool
    cfg = inputs.cfg
    judge = judge_engine(inputs, () if cfg.reward.judge.enable_resource_pool else _resident(trainer_roles, "gen"))
    shared = judge.held if judge else ()  # what a judge beside the actor keeps on its GPUs
    engine = _engine(inputs, () if own_rollout else _resident(trainer_roles, "gen") + shared)
    phases = [_phase(inputs, name, "trainer", trainer_roles, None if own_rollout else engine, cfg.world_size, shared)
              for name in STEP_ORDER if name in _trainer_phases(inputs, states, colocated_critic)]
    if judge is not None:
        phases = _with_judge(inputs, phases, judge, trainer_roles)
    if "critic" in states and not colocated_critic:
        phases += [_phase(inputs, name, "critic", (states["critic"],), None, cfg.critic_world_size)
                   for name in ("values", "update_critic")]
    if own_rollout:
        phases += _rollout_pool(inputs, engine)
    hosts = host_estimates(inputs, trainer_roles, states.get("critic"), colocated_critic, judge)
    return MemoryPlan(tuple(phases), hosts, engine.kv_cache_tokens)


def _with_judge(inputs: PlanInputs, phases: list[PhaseEstimate], judge: JudgeEngine,
                roles: tuple[RoleState, ...]) -> list[PhaseEstimate]:
    """The judge's pass: after generation on the actor's GPUs (with the rollout engine's memory still held, or the
    trainer's state alone when the engines have GPUs of their own), within it where it judges each response as it
    finishes, or on its own pool."""
    cal = inputs.calibration
    if judge.own_pool:
        worker = (("judge worker process", cal.trainer_process(inputs.cfg.judge_world_size)),)
        return phases + [judge_phase(inputs, judge, worker)]
    gen = next((p for p in phases if p.name == "gen"), None)
    if inputs.cfg.judge_streams and gen is not None:  # its pass runs within generation
        return [judge_phase(inputs, judge, gen.parts, name="gen") if p is gen else p for p in phases]
    if gen is not None:
        held = gen.parts
    else:
        held = ((("trainer process", cal.trainer_process(inputs.cfg.world_size)),) + judge.held
                + _resident(roles, "gen"))
    at = 1 if gen is not None else 0
    return phases[:at] + [judge_phase(inputs, judge, held)] + phases[at:]


def _trainer_phases(inputs: PlanInputs, states: dict[str, RoleState], colocated_critic: bool) -> set[str]:
    names = {"old_log_prob", "update_actor", "sync"} | (set() if inputs.cfg.rollout.enable_resource_pool else {"gen"})
    if inputs.cfg.use_reference:  # a reference of its own, or the LoRA actor without its adapters
        names.add("ref")
    if colocated_critic:
        names |= {"values", "update_critic"}
    return names


def _resident(roles: tuple[RoleState, ...], phase: str) -> Parts:
    return tuple(part for state in roles for part in state.gpu_parts(phase))


def _engine(inputs: PlanInputs, resident: Parts) -> Engine:
    """On a rollout pool of its own the engine shares its GPU with the rollout worker's process alone, whose memory
    outside torch is taken to be the trainer process's (its CUDA context and NCCL groups; not calibrated there)."""
    cfg = inputs.cfg
    free = inputs.free_at_engine_start(cfg.rollout_world_size, resident)
    share = int(cfg.rollout.gpu_memory_utilization * max(free, 0))
    tp = cfg.rollout.tensor_model_parallel_size
    weights = 2 * inputs.policy.parameters // tp
    kv_cache = share - weights
    return Engine(free, weights, kv_cache, max(kv_cache, 0) // inputs.policy.kv_cache_bytes_per_token(tp))


def _phase(inputs: PlanInputs, name: str, pool: str, roles: tuple[RoleState, ...],
           engine: Engine | None, gpus: int, shared: Parts = ()) -> PhaseEstimate:
    """`gpus`: the pool's world, whose size decides the process's collectives; `shared`: what another role keeps on
    the pool's GPUs in every phase (a judge's engine)."""
    cal = inputs.calibration
    base: Parts = (("trainer process", cal.trainer_process(gpus)),) + shared
    if engine:
        base += (("released engine", cal.released_engine(inputs.cfg.rollout.tensor_model_parallel_size)),)
    if name == "gen":
        return _gen(inputs, base + _resident(roles, "gen"), engine)
    if name == "sync":
        return _sync(inputs, base, roles, engine)
    if name in UPDATED:
        state = next(s for s in roles if s.role == UPDATED[name])
        return update_estimate(inputs, name, pool, base + _resident(roles, name), state)
    return PhaseEstimate(name, pool, base + _resident(roles, name) + _forward(inputs, name), inputs.gpu_bytes)


def _gen(inputs: PlanInputs, held: Parts, engine: Engine, pool: str = "trainer") -> PhaseEstimate:
    cal, cfg = inputs.calibration, inputs.cfg
    parts = held + (("engine weights", engine.weights), ("engine KV cache", max(engine.kv_cache, 0)),
                    ("engine runtime", gib(cal.engine_runtime_gib))) + _eager_decode(inputs, engine)
    problem = None
    if engine.free_at_start > 0 and engine.kv_cache_tokens < inputs.sequence_tokens:  # else the bytes do not fit
        leaves = "the trainer leaves" if pool == "trainer" else "its GPU has"
        problem = (f"the engine's share, rollout.gpu_memory_utilization={cfg.rollout.gpu_memory_utilization} of the "
                   f"{engine.free_at_start / GIB:.1f} GiB {leaves} free, holds {engine.kv_cache_tokens} "
                   f"KV-cache tokens beside its weights, fewer than one sequence ({inputs.sequence_tokens})")
    return PhaseEstimate("gen", pool, parts, inputs.gpu_bytes,
                         note=f"KV cache {engine.kv_cache_tokens:,} tokens", problem=problem)


def _eager_decode(inputs: PlanInputs, engine: Engine) -> Parts:
    """SGLang decodes a batch larger than its CUDA graphs (`cuda_graph_max_bs_decode` in rollout.engine_kwargs)
    eagerly, its [batch × vocabulary] logits, sampling and log-prob tensors in the engine process's own allocator for
    the generation (batches up to the cap run in the graphs' pool, which the released engine's footprint holds). The
    batch: the responses of one engine, or as many as the KV cache holds prompts for. Without a cap in the recipe,
    SGLang sizes its graphs itself and the plan takes them to cover the batch."""
    cfg, kwargs = inputs.cfg, inputs.cfg.rollout.engine_kwargs
    cap = 0 if kwargs.get("disable_cuda_graph") else kwargs.get("cuda_graph_max_bs_decode", kwargs.get("cuda_graph_max_bs"))
    engines = cfg.rollout_world_size // cfg.rollout.tensor_model_parallel_size
    responses = -(-cfg.data.generation_batch_size * cfg.rollout.n // engines)
    batch = min(responses, engine.kv_cache_tokens // cfg.data.max_prompt_length)
    if cap is None or batch <= cap:
        return ()
    per_entry = inputs.calibration.eager_decode_bytes_per_entry
    return (("engine eager decode", round(per_entry * batch * inputs.policy.vocab)),)


def _sync(inputs: PlanInputs, base: Parts, roles: tuple[RoleState, ...], engine: Engine | None) -> PhaseEstimate:
    bucket = ("sync bucket", gib(inputs.calibration.sync_bucket_gib))
    if engine is None:  # the engines have GPUs of their own: the actor's weights stream out over the bridge
        return PhaseEstimate("sync", "trainer", base + _resident(roles, "sync") + (bucket,), inputs.gpu_bytes,
                             note="while the weights stream")
    streaming = base + _resident(roles, "sync") + (("engine weights", engine.weights), bucket)
    resumed = base + _resident(roles, "gen") + (("engine weights", engine.weights),
                                                 ("engine KV cache", max(engine.kv_cache, 0)),
                                                 ("engine runtime", gib(inputs.calibration.engine_runtime_gib)))
    if sum(s for _, s in streaming) >= sum(s for _, s in resumed):
        return PhaseEstimate("sync", "trainer", streaming, inputs.gpu_bytes, note="while the weights stream")
    return PhaseEstimate("sync", "trainer", resumed, inputs.gpu_bytes, note="once the KV cache resumes")


def _rollout_pool(inputs: PlanInputs, engine: Engine) -> list[PhaseEstimate]:
    """The engines on GPUs of their own keep their memory: while they generate, and while the rollout worker receives
    a bucket of full tensors over the bridge and hands the engine its slices (fused copies for SGLang's layout)."""
    cal, cfg = inputs.calibration, inputs.cfg
    held: Parts = (("rollout worker process", cal.trainer_process(cfg.rollout_world_size)),
                   ("engine process", cal.released_engine(cfg.rollout.tensor_model_parallel_size)))
    gen = _gen(inputs, held, engine, pool="rollout")
    bucket = gib(cal.sync_bucket_gib)
    sync = PhaseEstimate("sync", "rollout", gen.parts + (("received bucket", bucket), ("engine-layout copies", bucket)),
                         inputs.gpu_bytes, note="while the weights arrive")
    return [gen, sync]


def _forward(inputs: PlanInputs, phase: str) -> Parts:
    """A forward pass's own transient memory: the running layer's activations, and in the actor's and the
    reference's passes the output layer's bf16 logits [tokens × vocab/tp] (megarl/plan/update.py says why bf16)."""
    cfg, cal = inputs.cfg, inputs.calibration
    tokens = micro_batch_tokens(inputs, phase)
    shape, mesh = (inputs.critic, inputs.mesh("critic")) if phase == "values" else (inputs.policy, inputs.mesh("actor"))
    parts: Parts = (("activations", round(cal.activation_scale * forward_bytes(shape, mesh, tokens))),)
    if phase == "values":  # the value head's output is one number per token
        return parts
    return parts + (("logits", logits_bytes(shape, mesh, tokens)),)
