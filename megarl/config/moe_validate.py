"""Mixture-of-experts recipes checked (docs/models.md): expert parallelism against the model's experts and the
GPUs, and what an MoE model cannot do in megarl yet, each named with the key to change."""

from __future__ import annotations

from megarl.config.schema import MegaRLConfig, MegatronConfig
from megarl.config.ranges import divisors
from megarl.models.shapes import experts_of


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
    grid = ep * megatron.tensor_model_parallel_size * megatron.pipeline_model_parallel_size
    if world % grid:
        problems.append(f"{key}={ep} × tensor × pipeline parallel = {grid} must divide the role's {world} GPUs "
                        "(megatron's expert grid; the experts' tensor parallelism is the layers')")


def check_moe_policy(cfg: MegaRLConfig, problems: list[str], hf: dict) -> None:
    """What an MoE policy (`hf`, model.path's config) cannot do yet."""
    if not experts_of(hf):
        return
    if cfg.actor.lora.rank:
        problems.append(f"actor.lora.rank={cfg.actor.lora.rank}: LoRA on a mixture-of-experts model is not built yet "
                        "(issue #49): set actor.lora.rank=0")
    if cfg.rollout.name == "sglang" and cfg.rollout.tensor_model_parallel_size > 1:
        problems.append(f"rollout.tensor_model_parallel_size={cfg.rollout.tensor_model_parallel_size}: SGLang engines "
                        "of several GPUs do not take a mixture-of-experts model's weights from megarl yet (issue #49): "
                        "set it to 1")
    if cfg.use_critic and cfg.critic.model.path in (None, cfg.model.path):
        problems.append(f"algorithm.adv_estimator={cfg.algorithm.adv_estimator} trains a critic on the policy's "
                        "mixture-of-experts checkpoint, which megarl does not build yet (issue #49): use grpo, rloo "
                        "or another estimator without a critic, or a dense critic.model.path")
