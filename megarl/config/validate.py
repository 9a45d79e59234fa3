"""Consistency checks across a loaded config; each problem names its key and the fix."""

from __future__ import annotations

import json
from pathlib import Path

from megarl.agent.calls import CALL_PARSERS
from megarl.agent.tools import TOOLS
from megarl.algorithms import ADV_ESTIMATORS, KL_ESTIMATORS, LOSS_AGG_MODES, POLICY_LOSSES
from megarl.algorithms.rollout_correction import IS_LEVELS, RS_LEVELS
from megarl.config.judge_validate import check_judge
from megarl.config.lora_checks import check_lora
from megarl.config.moe_validate import check_experts, check_moe_policy, check_router_replay
from megarl.config.ranges import check_numeric_ranges, divisors
from megarl.config.rollout_validate import check_engine_log_probs, check_rollout_placement
from megarl.config.errors import ConfigError
from megarl.config.schema import HEALTH_CHECKS, ROLLOUT_MODES, MegaRLConfig, MegatronConfig, MultiTurnConfig, RunConfig
from megarl.data.dataset import TRUNCATIONS
from megarl.models.accelerators import TRANSFORMER_IMPLS, transformer_engine_available
from megarl.models.shapes import MODEL_TYPES, heads_split_problem
from megarl.plugins import spec_problems
from megarl.registry import did_you_mean
from megarl.rewards.code import MODES as CODE_MODES
from megarl.rollout import ROLLOUT_BACKENDS
from megarl.sandbox.backends import BACKENDS as SANDBOX_BACKENDS
from parallel.launcher import LAUNCHERS
from parallel.profiler import PROFILE_TOOLS

LOGGERS = ("console", "tensorboard", "wandb")
RESUME_MODES = ("auto", "disable", "resume_path")
LR_DECAY_STYLES = ("constant", "linear", "cosine")
RECOMPUTE_GRANULARITIES = (None, "full", "selective")
GROUP_ESTIMATORS = ("grpo", "rloo", "reinforce_plus_plus_baseline")


def validate_config(cfg: MegaRLConfig) -> None:
    problems: list[str] = []
    _check_choices(cfg, problems)
    check_numeric_ranges(cfg, problems)
    _check_sizes(cfg, problems)
    _check_batches(cfg, problems)
    _check_meshes(cfg, problems)
    _check_algorithm(cfg, problems)
    _check_dapo(cfg, problems)
    _check_reward_weights(cfg, problems)
    check_judge(cfg, problems)
    check_lora(cfg, problems)
    _check_against_model(cfg, problems)
    if problems:
        raise ConfigError(problems)


def check_choice(problems: list[str], key: str, value, choices) -> None:
    if value not in choices:
        shown = ", ".join(str(c) for c in choices)
        problems.append(f"{key}={value!r} is not one of: {shown}.{did_you_mean(str(value), map(str, choices))}")


def _check_choices(cfg: MegaRLConfig, problems: list[str]) -> None:
    check_choice(problems, "data.truncation", cfg.data.truncation, TRUNCATIONS)
    check_choice(problems, "trainer.profile_tool", cfg.trainer.profile_tool, PROFILE_TOOLS)
    check_choice(problems, "algorithm.adv_estimator", cfg.algorithm.adv_estimator, ADV_ESTIMATORS.names())
    check_choice(problems, "algorithm.kl_penalty", cfg.algorithm.kl_penalty, KL_ESTIMATORS.names())
    check_choice(problems, "algorithm.kl_ctrl.type", cfg.algorithm.kl_ctrl.type, ("fixed", "adaptive"))
    check_choice(problems, "actor.kl_loss_type", cfg.actor.kl_loss_type, KL_ESTIMATORS.names())
    check_choice(problems, "actor.policy_loss", cfg.actor.policy_loss, POLICY_LOSSES.names())
    check_choice(problems, "actor.loss_agg_mode", cfg.actor.loss_agg_mode, LOSS_AGG_MODES)
    if cfg.critic.loss_agg_mode != cfg.actor.loss_agg_mode:
        check_choice(problems, "critic.loss_agg_mode", cfg.critic.loss_agg_mode, LOSS_AGG_MODES)
    if ":" in cfg.rollout.name:  # user code: 'path/to/file.py:Class'
        problems += spec_problems(cfg.rollout.name, "rollout.name")
    else:
        check_choice(problems, "rollout.name", cfg.rollout.name, ROLLOUT_BACKENDS.names())
    check_choice(problems, "rollout.mode", cfg.rollout.mode, ROLLOUT_MODES)
    check_choice(problems, "trainer.resume_mode", cfg.trainer.resume_mode, RESUME_MODES)
    for role in ("actor", "critic"):
        section = getattr(cfg, role)
        check_choice(problems, f"{role}.optim.lr_decay_style", section.optim.lr_decay_style, LR_DECAY_STYLES)
        check_megatron_choices(problems, f"{role}.megatron", section.megatron)
    check_megatron_choices(problems, "reward.model.megatron", cfg.reward.model.megatron)
    check_run_choices(problems, cfg.trainer)
    if cfg.trainer.resume_mode == "resume_path" and not cfg.trainer.resume_from_path:
        problems.append("trainer.resume_mode=resume_path needs trainer.resume_from_path=<checkpoint dir>")
    if cfg.reward.function is not None:
        problems += spec_problems(cfg.reward.function, "reward.function")
    check_choice(problems, "reward.code.mode", cfg.reward.code.mode, CODE_MODES)
    check_choice(problems, "reward.sandbox.backend", cfg.reward.sandbox.backend, ("auto", *SANDBOX_BACKENDS))
    _check_multi_turn(cfg.rollout.multi_turn, problems)


def _check_multi_turn(multi_turn: MultiTurnConfig, problems: list[str]) -> None:
    if not multi_turn.enable:
        return
    check_choice(problems, "rollout.multi_turn.format", multi_turn.format, CALL_PARSERS.names())
    if not multi_turn.tools:
        problems.append("rollout.multi_turn.tools is empty: name the tools the model may call (e.g. [python])")
    for name in multi_turn.tools:
        if ":" in name:  # user code: 'path/to/file.py:Class'
            problems += spec_problems(name, "rollout.multi_turn.tools")
        else:
            check_choice(problems, "rollout.multi_turn.tools", name, TOOLS.names())


def _check_sizes(cfg: MegaRLConfig, problems: list[str]) -> None:
    positive = {
        "data.train_batch_size": cfg.data.train_batch_size,
        "data.max_prompt_length": cfg.data.max_prompt_length,
        "data.max_response_length": cfg.data.max_response_length,
        "actor.ppo_mini_batch_size": cfg.actor.ppo_mini_batch_size,
        "actor.ppo_micro_batch_size_per_gpu": cfg.actor.ppo_micro_batch_size_per_gpu,
        "actor.log_prob_micro_batch_size_per_gpu": cfg.actor.log_prob_micro_batch_size_per_gpu,
        "actor.ppo_max_token_len_per_gpu": cfg.actor.ppo_max_token_len_per_gpu,
        "actor.log_prob_max_token_len_per_gpu": cfg.actor.log_prob_max_token_len_per_gpu,
        "actor.ppo_epochs": cfg.actor.ppo_epochs,
        "rollout.n": cfg.rollout.n,
        "rollout.val_kwargs.n": cfg.rollout.val_kwargs.n,
        "rollout.tensor_model_parallel_size": cfg.rollout.tensor_model_parallel_size,
        "reward.workers": cfg.reward.workers,
        **run_sizes(cfg.trainer),
    }
    if cfg.use_critic and cfg.critic.enable_resource_pool:
        positive["critic.nnodes"] = cfg.critic.nnodes
        positive["critic.n_gpus_per_node"] = cfg.critic.n_gpus_per_node
    if cfg.rollout.enable_resource_pool:
        positive["rollout.nnodes"] = cfg.rollout.nnodes
        positive["rollout.n_gpus_per_node"] = cfg.rollout.n_gpus_per_node
    if cfg.use_critic:
        for name in ("ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu", "forward_micro_batch_size_per_gpu",
                     "ppo_max_token_len_per_gpu", "forward_max_token_len_per_gpu", "ppo_epochs"):
            positive[f"critic.{name}"] = getattr(cfg.critic, name)
    if cfg.use_reference:
        positive["ref.log_prob_micro_batch_size_per_gpu"] = cfg.ref.log_prob_micro_batch_size_per_gpu
        positive["ref.log_prob_max_token_len_per_gpu"] = cfg.ref.log_prob_max_token_len_per_gpu
    if cfg.data.val_batch_size is not None:
        positive["data.val_batch_size"] = cfg.data.val_batch_size
    if cfg.trainer.max_ckpt_to_keep is not None:
        positive["trainer.max_ckpt_to_keep"] = cfg.trainer.max_ckpt_to_keep
    positive.update({f"trainer.profile_steps[{i}]": step for i, step in enumerate(cfg.trainer.profile_steps)})
    for role in ("actor", "critic"):
        positive.update(megatron_sizes(f"{role}.megatron", getattr(cfg, role).megatron))
    check_positive(problems, positive)
    limit = cfg.rollout.max_logprob_mult_error
    if limit is not None and limit <= 1:
        problems.append(f"rollout.max_logprob_mult_error={limit} must be > 1 (1 is exact agreement), e.g. 1.05")
    if not cfg.reward.timeout_s > 0:
        problems.append(f"reward.timeout_s={cfg.reward.timeout_s} must be > 0 (seconds one reward.function call may "
                        "run), e.g. 60")
    if not 0 < cfg.rollout.gpu_memory_utilization < 1:
        problems.append(f"rollout.gpu_memory_utilization={cfg.rollout.gpu_memory_utilization} must be in (0, 1)")


def check_positive(problems: list[str], sizes: dict[str, int]) -> bool:
    """Report each of `sizes` ({key: value}) below 1; whether any was."""
    bad = [f"{key}={value} must be at least 1" for key, value in sizes.items() if value < 1]
    problems.extend(bad)
    return bool(bad)


def check_run_choices(problems: list[str], trainer: RunConfig) -> None:
    """The choices every run (RL or SFT) makes in `trainer.*`: loggers and launcher."""
    for logger in trainer.logger:
        check_choice(problems, "trainer.logger", logger, LOGGERS)
    check_choice(problems, "trainer.launcher", trainer.launcher, LAUNCHERS)


def run_sizes(trainer: RunConfig) -> dict[str, int]:
    """The `trainer.*` sizes every run has, each of which must be at least 1."""
    sizes = {"trainer.total_epochs": trainer.total_epochs, "trainer.nnodes": trainer.nnodes,
             "trainer.n_gpus_per_node": trainer.n_gpus_per_node,
             "trainer.collective_timeout_s": trainer.collective_timeout_s}
    if trainer.total_training_steps is not None:
        sizes["trainer.total_training_steps"] = trainer.total_training_steps
    if trainer.log_interval is not None:
        sizes["trainer.log_interval"] = trainer.log_interval
    return sizes


def check_megatron_choices(problems: list[str], key: str, megatron: MegatronConfig) -> None:
    """A role's `megatron` section at `key`: its recompute granularity and transformer layers."""
    check_choice(problems, f"{key}.recompute_granularity", megatron.recompute_granularity, RECOMPUTE_GRANULARITIES)
    check_choice(problems, f"{key}.transformer_impl", megatron.transformer_impl, TRANSFORMER_IMPLS)
    if megatron.transformer_impl == "transformer_engine" and not transformer_engine_available():
        problems.append(f"{key}.transformer_impl=transformer_engine needs Transformer Engine, which is not importable "
                        "here: install it (pip install -e \".[accel]\") or use auto (megarl's tested local layers)")


def megatron_sizes(key: str, megatron: MegatronConfig) -> dict[str, int]:
    """A role's parallel sizes, each of which must be at least 1."""
    return {f"{key}.{name}": getattr(megatron, name)
            for name in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                         "expert_model_parallel_size")}


def _check_batches(cfg: MegaRLConfig, problems: list[str]) -> None:
    if min(cfg.data.train_batch_size, cfg.actor.ppo_mini_batch_size, cfg.rollout.n, cfg.world_size,
           cfg.critic_world_size) < 1:
        return  # already reported by _check_sizes
    roles = [("actor", cfg.actor)]
    if cfg.use_critic and _batching(cfg.critic) != _batching(cfg.actor):
        roles.append(("critic", cfg.critic))  # a critic that inherits the actor's batching has its errors
    for role, section in roles:
        mini = section.ppo_mini_batch_size
        if mini < 1 or section.megatron.model_parallel_size < 1:
            continue
        if cfg.data.train_batch_size % mini:
            problems.append(
                f"{role}.ppo_mini_batch_size={mini} does not divide data.train_batch_size="
                f"{cfg.data.train_batch_size}: use one of {divisors(cfg.data.train_batch_size)}"
            )
            continue
        dp = cfg.dp_size(role)
        samples = mini * cfg.rollout.n
        if dp < 1 or samples % dp:
            if dp >= 1:
                problems.append(
                    f"{role}.ppo_mini_batch_size × rollout.n = {samples} samples cannot be split over {dp} "
                    f"data-parallel ranks: make it a multiple of {dp}"
                )
            continue
        micro = section.ppo_micro_batch_size_per_gpu
        if not section.use_dynamic_bsz and micro >= 1 and (samples // dp) % micro:
            problems.append(
                f"{role}.ppo_micro_batch_size_per_gpu={micro} does not divide the {samples // dp} samples each "
                f"data-parallel rank gets per mini-batch: use one of {divisors(samples // dp)}, "
                f"or {role}.use_dynamic_bsz=true"
            )


def _batching(section) -> tuple:
    return (
        section.ppo_mini_batch_size,
        section.ppo_micro_batch_size_per_gpu,
        section.use_dynamic_bsz,
        section.megatron.model_parallel_size,
    )


def _check_meshes(cfg: MegaRLConfig, problems: list[str]) -> None:
    roles = [("actor", cfg.actor.megatron, cfg.world_size, "trainer")]
    if cfg.use_critic:
        pool = "critic" if cfg.critic.enable_resource_pool else "trainer"
        roles.append(("critic", cfg.critic.megatron, cfg.critic_world_size, pool))
    own_rm_pool = cfg.reward.model.path and cfg.reward.model.enable_resource_pool
    if own_rm_pool:
        roles.append(("reward.model", cfg.reward.model.megatron, cfg.reward_model_world_size, "reward.model"))
    for role, megatron, world, pool in roles:
        mp = megatron.model_parallel_size
        if mp >= 1 and world % mp:
            problems.append(
                f"{role}.megatron: tensor × pipeline × context parallel = {mp} does not divide the "
                f"{world} GPUs ({pool}.nnodes × {pool}.n_gpus_per_node)"
            )
    if cfg.use_critic and not cfg.critic.enable_resource_pool:
        _check_colocated_mesh(problems, "critic", cfg.critic.megatron, cfg.actor.megatron,
                              "a critic colocated with the actor shares its processes",
                              ", or give the critic its own GPUs with critic.enable_resource_pool=true (Ray launcher)")
    if cfg.reward.model.path and not own_rm_pool:
        _check_colocated_mesh(problems, "reward.model", cfg.reward.model.megatron, cfg.actor.megatron,
                              "the reward model runs in the actor's processes",
                              ", or give it its own GPUs with reward.model.enable_resource_pool=true (Ray launcher)")
    # Under torchrun a pool of its own serves the driver's calls (parallel/served_backend.py): tested for the
    # rollout engines and the judge only.
    own_pools = [("critic", cfg.use_critic and cfg.critic.enable_resource_pool), ("reward.model", own_rm_pool)]
    for role, own_pool in own_pools:
        if own_pool and cfg.trainer.launcher == "torchrun":
            problems.append(f"{role}.enable_resource_pool=true needs trainer.launcher=ray (under torchrun only the "
                            "rollout engines may have GPUs of their own)")
    check_rollout_placement(cfg, problems)
    check_engine_log_probs(cfg, problems)


def _check_colocated_mesh(problems: list[str], role: str, megatron: MegatronConfig, actor: MegatronConfig,
                          why: str, alternative: str = "") -> None:
    mesh = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
            "expert_model_parallel_size")
    differ = [n for n in mesh if getattr(megatron, n) != getattr(actor, n)]
    if differ:
        problems.append(f"{why} and so its megatron mesh: set "
                        + ", ".join(f"{role}.megatron.{n}={getattr(actor, n)}" for n in differ) + alternative)


def _check_reward_weights(cfg: MegaRLConfig, problems: list[str]) -> None:
    reward = cfg.reward
    if reward.rule_weight < 0:
        problems.append(f"reward.rule_weight={reward.rule_weight} must be ≥ 0")
    elif reward.rule_weight == 0 and not reward.scored_by_models:
        problems.append("reward.rule_weight=0 leaves no reward without a reward model or a judge: set "
                        "reward.model.path or reward.judge.model.path, or reward.rule_weight > 0")


def _check_algorithm(cfg: MegaRLConfig, problems: list[str]) -> None:
    kl_ctrl = cfg.algorithm.kl_ctrl
    if kl_ctrl.type == "adaptive" and (kl_ctrl.target_kl <= 0 or kl_ctrl.horizon <= 0):
        problems.append("algorithm.kl_ctrl.type=adaptive needs kl_ctrl.target_kl > 0 and kl_ctrl.horizon > 0")
    if cfg.algorithm.adv_estimator in GROUP_ESTIMATORS and cfg.rollout.n < 2:
        problems.append(
            f"algorithm.adv_estimator={cfg.algorithm.adv_estimator} compares the rollout.n responses to each "
            f"prompt, but rollout.n={cfg.rollout.n}: set rollout.n ≥ 2"
        )


FILTER_METRICS = ("acc", "seq_reward")


def _check_dapo(cfg: MegaRLConfig, problems: list[str]) -> None:
    groups, data = cfg.algorithm.filter_groups, cfg.data
    if groups.enable:
        check_choice(problems, "algorithm.filter_groups.metric", groups.metric, FILTER_METRICS)
        if cfg.rollout.n < 2:
            problems.append(f"algorithm.filter_groups keeps groups whose rollout.n responses differ, but rollout.n="
                            f"{cfg.rollout.n}: set rollout.n ≥ 2")
        if groups.max_num_gen_batches < 0:
            problems.append(f"algorithm.filter_groups.max_num_gen_batches={groups.max_num_gen_batches} must be ≥ 0 "
                            "(0: no limit)")
        if data.gen_batch_size is not None and data.gen_batch_size < 1:
            problems.append(f"data.gen_batch_size={data.gen_batch_size} must be ≥ 1")
    elif data.gen_batch_size not in (None, data.train_batch_size):
        problems.append(f"data.gen_batch_size={data.gen_batch_size} differs from data.train_batch_size="
                        f"{data.train_batch_size}, which only dynamic sampling allows: set "
                        "algorithm.filter_groups.enable=true, or drop data.gen_batch_size")
    rollout_tp = cfg.rollout.tensor_model_parallel_size
    engines = cfg.rollout_world_size // rollout_tp if rollout_tp >= 1 else 0
    for key, prompts in (("data.train_batch_size", data.train_batch_size),
                         ("data.gen_batch_size", data.gen_batch_size)):
        if prompts is not None and prompts >= 1 and engines >= 1 and prompts % engines:
            problems.append(f"{key}={prompts} prompts cannot be shared among the {engines} rollout engines "
                            f"(GPUs / rollout.tensor_model_parallel_size={rollout_tp}): make it a multiple of "
                            f"{engines}")
    _check_ptx(cfg, problems)
    _check_rollout_correction(cfg.algorithm.rollout_correction, problems)
    for name in cfg.trainer.health.stop_on:
        check_choice(problems, "trainer.health.stop_on", name, tuple(HEALTH_CHECKS))
    overlong = cfg.reward.overlong_buffer
    if overlong.enable and not 0 < overlong.len <= data.max_response_length:
        problems.append(f"reward.overlong_buffer.len={overlong.len} must be in [1, data.max_response_length="
                        f"{data.max_response_length}] (the last tokens before the limit where the penalty grows)")
    if overlong.enable and overlong.penalty_factor < 0:
        problems.append(f"reward.overlong_buffer.penalty_factor={overlong.penalty_factor} must be ≥ 0")


def _check_rollout_correction(correction, problems: list[str]) -> None:
    key = "algorithm.rollout_correction"
    if correction.rollout_is is not None:
        check_choice(problems, f"{key}.rollout_is", correction.rollout_is, IS_LEVELS)
    if correction.rollout_rs is not None:
        check_choice(problems, f"{key}.rollout_rs", correction.rollout_rs, RS_LEVELS)
    if correction.rollout_is_threshold <= 0:
        problems.append(f"{key}.rollout_is_threshold={correction.rollout_is_threshold} must be > 0")
    elif correction.rollout_rs is not None and not 0 < correction.rs_lower <= correction.rs_upper:
        problems.append(f"{key}: the rejection bounds [{correction.rs_lower}, {correction.rs_upper}] "
                        "(rollout_rs_threshold_lower, rollout_rs_threshold) must satisfy 0 < lower ≤ upper")


def _check_ptx(cfg: MegaRLConfig, problems: list[str]) -> None:
    coef, files = cfg.actor.ptx_coef, cfg.data.ptx_files
    if coef < 0:
        problems.append(f"actor.ptx_coef={coef} must be ≥ 0 (the pretraining loss's weight; 0: off)")
    elif coef > 0 and not files:
        problems.append(f"actor.ptx_coef={coef} needs pretraining data: set data.ptx_files to parquet files")
    elif coef == 0 and files:
        problems.append("data.ptx_files is set but actor.ptx_coef=0 leaves it unused: set actor.ptx_coef > 0 "
                        "(InstructGPT's PPO-ptx used 27.8), or drop data.ptx_files")


def read_hf_config(path: str | None) -> dict | None:
    """The HF config.json under `path`, or None when there is no readable one."""
    if not path:
        return None
    file = Path(path).expanduser() / "config.json"
    if not file.is_file():
        return None
    try:
        return json.loads(file.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def check_model_type(problems: list[str], key: str, path: str, hf: dict) -> None:
    """`key`'s model (its config.json `hf`, read from `path`) is of a family megarl builds."""
    model_type = hf.get("model_type")
    if model_type not in MODEL_TYPES:
        problems.append(f"{key}={path}: model_type {model_type!r} ({path}/config.json) is not an architecture megarl "
                        f"builds ({', '.join(MODEL_TYPES)}): start from a checkpoint of one of those families")


def check_mesh_fits_model(problems: list[str], role: str, megatron: MegatronConfig, hf: dict, where: str,
                          world: int) -> None:
    """`role`'s mesh against its model and its pool's `world` GPUs."""
    check_experts(problems, role, megatron, hf, where, world)
    _check_tp_splits_heads(problems, f"{role}.megatron.tensor_model_parallel_size",
                           megatron.tensor_model_parallel_size, hf, where)
    layers = hf.get("num_hidden_layers")
    pp = megatron.pipeline_model_parallel_size
    if layers and pp >= 1 and layers % pp:
        problems.append(
            f"{role}.megatron.pipeline_model_parallel_size={pp} must divide the model's {layers} layers "
            f"({where}): use one of {divisors(layers)}"
        )


def _check_tp_splits_heads(problems: list[str], key: str, tp: int, hf: dict, where: str) -> None:
    heads = hf.get("num_attention_heads")
    kv_heads = hf.get("num_key_value_heads") or heads
    problem = heads and heads_split_problem(tp, kv_heads, heads)
    if problem:
        problems.append(f"{key}={tp} {problem} ({where}): use one of {divisors(kv_heads)}")


def _check_against_model(cfg: MegaRLConfig, problems: list[str]) -> None:
    hf = read_hf_config(cfg.model.path)
    check_router_replay(cfg, problems, hf)
    if hf is not None:
        where = f"{cfg.model.path}/config.json"
        check_model_type(problems, "model.path", cfg.model.path, hf)
        check_mesh_fits_model(problems, "actor", cfg.actor.megatron, hf, where, cfg.world_size)
        check_moe_policy(cfg, problems, hf)
        _check_tp_splits_heads(problems, "rollout.tensor_model_parallel_size", cfg.rollout.tensor_model_parallel_size,
                               hf, where)
        max_positions = hf.get("max_position_embeddings")
        total = cfg.data.max_prompt_length + cfg.data.max_response_length
        if max_positions and total > max_positions:
            problems.append(
                f"data.max_prompt_length + data.max_response_length = {total} exceeds the model's "
                f"max_position_embeddings={max_positions} ({where})"
            )
    if cfg.use_critic:
        critic_hf = read_hf_config(cfg.critic.model.path)
        if critic_hf is not None and cfg.critic.model.path != cfg.model.path:
            check_model_type(problems, "critic.model.path", cfg.critic.model.path, critic_hf)
        if critic_hf is not None:
            where = f"{cfg.critic.model.path}/config.json"
            check_mesh_fits_model(problems, "critic", cfg.critic.megatron, critic_hf, where, cfg.critic_world_size)
    reward_model_hf = read_hf_config(cfg.reward.model.path)
    if reward_model_hf is not None:
        check_model_type(problems, "reward.model.path", cfg.reward.model.path, reward_model_hf)
