"""Mixture-of-experts recipes checked (docs/models.md): expert parallelism against the model's experts and the
GPUs, and what an MoE model cannot do in megarl yet, each named with the key to change."""

from __future__ import annotations

from megarl.config.ranges import divisors
from megarl.config.schema import ROUTER_REPLAY_MODES, MegaRLConfig, MegatronConfig
from megarl.models.shapes import experts_of

MLP_TARGETS = ("linear_fc1", "linear_fc2")  # LoRA's targets that would be an MoE layer's experts


def expert_grid(megatron: MegatronConfig) -> int:
    """The ranks megatron's expert grid spans: EP × TP × PP (the experts' tensor parallelism is the layers')."""
    return (megatron.expert_model_parallel_size * megatron.tensor_model_parallel_size
            * megatron.pipeline_model_parallel_size)


def check_experts(problems: list[str], role: str, megatron: MegatronConfig, hf: dict, where: str,
                  world: int) -> None:
    """`role`'s expert parallelism against its model (`hf`, read from `where`) and its pool's `world` GPUs."""
    ep, experts = megatron.expert_model_parallel_size, experts_of(hf)
    for name in ("moe_aux_loss_coeff", "moe_z_loss_coeff"):
        coeff = getattr(megatron, name)
        if not (coeff >= 0 and coeff != float("inf")):
            problems.append(f"{role}.megatron.{name}={coeff} must be a finite number ≥ 0 (0: off)")
        elif coeff and not experts:
            problems.append(f"{role}.megatron.{name}={coeff} weighs a mixture-of-experts router's loss, but {where} "
                            "is a dense model: set it to 0")
    key = f"{role}.megatron.expert_model_parallel_size"
    if ep < 1:
        return  # megatron_sizes' problem
    if ep > 1 and not experts:
        problems.append(f"{key}={ep} splits a mixture-of-experts model's experts, but {where} is a dense model: "
                        "set it to 1")
        return
    if experts and experts % ep:
        problems.append(f"{key}={ep} must divide the model's {experts} experts ({where}): use one of "
                        f"{divisors(experts)}")
    grid = expert_grid(megatron)
    if world % grid:
        problems.append(f"{key}={ep} × tensor × pipeline parallel = {grid} must divide the role's {world} GPUs "
                        "(megatron's expert grid; the experts' tensor parallelism is the layers')")


def check_moe_policy(cfg: MegaRLConfig, problems: list[str], hf: dict) -> None:
    """What an MoE policy (`hf`, model.path's config) cannot do yet."""
    if not experts_of(hf):
        return
    expert_targets = [name for name in cfg.actor.lora.target_modules if name in MLP_TARGETS]
    if cfg.actor.lora.rank and expert_targets:
        problems.append(f"actor.lora.target_modules={list(cfg.actor.lora.target_modules)}: on a mixture-of-experts "
                        f"model LoRA adapts the attention layers alone; its experts ({', '.join(expert_targets)}) "
                        "take no adapters in megarl yet (issue #49): set actor.lora.target_modules=[linear_qkv,"
                        "linear_proj]")
    if cfg.rollout.name == "sglang" and cfg.rollout.tensor_model_parallel_size > 1:
        check_expert_parallel_engine(cfg, problems, experts_of(hf))


def check_expert_parallel_engine(cfg: MegaRLConfig, problems: list[str], experts: int) -> None:
    """An SGLang engine of several GPUs holds each expert whole on one of them (its `ep_size`), taking them from the
    actor's expert-parallel ranks through the reshard layer (parallel/reshard.py)."""
    key = f"rollout.tensor_model_parallel_size={cfg.rollout.tensor_model_parallel_size}"
    megatron = cfg.actor.megatron
    if cfg.rollout.enable_resource_pool:
        problems.append(f"{key}: SGLang engines of several GPUs on GPUs of their own (rollout.enable_resource_pool) do "
                        "not take a mixture-of-experts model's weights yet (issue #49): set it to 1, or colocate them")
    elif megatron.tensor_model_parallel_size > 1 or megatron.pipeline_model_parallel_size > 1:
        problems.append(f"{key}: an SGLang engine of several GPUs takes a mixture-of-experts model's experts whole "
                        "from actor ranks of tensor and pipeline parallel 1, but the actor has "
                        f"{megatron.tensor_model_parallel_size} and {megatron.pipeline_model_parallel_size}: set "
                        "actor.megatron.tensor_model_parallel_size=1 and pipeline_model_parallel_size=1 (expert "
                        "parallelism splits the model), or the rollout's to 1")
    elif experts % cfg.rollout.tensor_model_parallel_size:
        problems.append(f"{key} must divide the model's {experts} experts: an SGLang engine of several GPUs holds "
                        f"each expert whole on one of them; use one of {divisors(experts)}")


def check_router_replay(cfg: MegaRLConfig, problems: list[str], hf: dict | None) -> None:
    """`actor.router_replay.mode` (verl's names) against the policy (`hf`, model.path's config; None: unread) and
    what R3 does not handle yet: sequence parallelism (a share of a micro-batch's tokens on each tensor-parallel
    rank)."""
    replay = cfg.actor.router_replay
    if replay.mode == "R2":
        problems.append("actor.router_replay.mode=R2 (the trainer's own routing of the old-log-prob pass, replayed in "
                        "the update) is not built: use R3 (the rollout engine's routing) or disabled")
        return
    if replay.mode not in ROUTER_REPLAY_MODES:
        problems.append(f"actor.router_replay.mode={replay.mode!r} is not one of: {', '.join(ROUTER_REPLAY_MODES)}")
        return
    if not replay.replays_rollout:
        return
    key = "actor.router_replay.mode=R3"
    if hf is not None and not experts_of(hf):
        problems.append(f"{key} replays a mixture-of-experts router's choices, but {cfg.model.path} is a dense model: "
                        "set actor.router_replay.mode=disabled")
    megatron = cfg.actor.megatron
    if megatron.transformer_impl == "transformer_engine" and megatron.tensor_model_parallel_size > 1:
        problems.append(f"{key} with actor.megatron.transformer_impl=transformer_engine at tensor parallel > 1 "
                        "(sequence parallel: each rank routes a share of the tokens) is not built yet: use "
                        "transformer_impl=local or actor.router_replay.mode=disabled")
