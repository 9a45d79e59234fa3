"""Consistency checks across a loaded reward-model config (each problem names its key and the fix), and the
reward-model recipe schema that `load_config` loads with them."""

from __future__ import annotations

from megarl.config.loader import ConfigError, RecipeSchema
from megarl.config.rm_schema import RMConfig
from megarl.config.validate import (
    LR_DECAY_STYLES,
    check_choice,
    check_megatron_choices,
    check_mesh_fits_model,
    check_positive,
    check_run_choices,
    divisors,
    megatron_sizes,
    read_hf_config,
    run_sizes,
)
from megarl.config.verl_keys import translate_verl_sft_key


def validate_rm_config(cfg: RMConfig) -> None:
    problems: list[str] = []
    _check_choices(cfg, problems)
    if not _check_sizes(cfg, problems):
        _check_batches(cfg, problems)
    _check_against_model(cfg, problems)
    if problems:
        raise ConfigError(problems)


def _check_choices(cfg: RMConfig, problems: list[str]) -> None:
    check_choice(problems, "optim.lr_decay_style", cfg.optim.lr_decay_style, LR_DECAY_STYLES)
    check_megatron_choices(problems, "critic.megatron", cfg.critic.megatron)
    if len(cfg.optim.betas) != 2:
        problems.append(f"optim.betas={cfg.optim.betas} must be two numbers, e.g. [0.9, 0.95]")
    check_run_choices(problems, cfg.trainer)
    for key in ("prompt_key", "responses_key", "chosen_key", "rejected_key"):
        if not getattr(cfg.data, key):
            problems.append(f"data.{key} is empty: name the column that holds it (see `megarl rm --help-keys`)")
    if cfg.rm.margin < 0:
        problems.append(f"rm.margin={cfg.rm.margin} must be ≥ 0 (how far the better response's score must lead "
                        "before a pair stops adding loss); 0 is InstructGPT's loss")


def _check_sizes(cfg: RMConfig, problems: list[str]) -> bool:
    """Whether a size that must be positive is not (then the batch arithmetic is skipped)."""
    positive = {
        "data.max_length": cfg.data.max_length,
        "data.train_batch_size": cfg.data.train_batch_size,
        "data.micro_batch_size_per_gpu": cfg.data.micro_batch_size_per_gpu,
        "data.max_token_len_per_gpu": cfg.data.max_token_len_per_gpu,
        **run_sizes(cfg.trainer),
        **megatron_sizes("critic.megatron", cfg.critic.megatron),
    }
    if cfg.data.val_batch_size is not None:
        positive["data.val_batch_size"] = cfg.data.val_batch_size
    return check_positive(problems, positive)


def _check_batches(cfg: RMConfig, problems: list[str]) -> None:
    mp = cfg.critic.megatron.model_parallel_size
    if cfg.world_size % mp:
        problems.append(
            f"critic.megatron: tensor × pipeline × context parallel = {mp} does not divide the {cfg.world_size} "
            "GPUs (trainer.nnodes × trainer.n_gpus_per_node)"
        )
        return
    dp, batch, micro = cfg.dp_size, cfg.data.train_batch_size, cfg.data.micro_batch_size_per_gpu
    if batch % dp:
        problems.append(
            f"data.train_batch_size={batch} cannot be split over {dp} data-parallel ranks "
            f"(GPUs / model-parallel size): make it a multiple of {dp}"
        )
    elif not cfg.data.use_dynamic_bsz and (batch // dp) % micro:
        problems.append(
            f"data.micro_batch_size_per_gpu={micro} does not divide the {batch // dp} rankings each data-parallel "
            f"rank gets per step: use one of {divisors(batch // dp)}, or data.use_dynamic_bsz=true"
        )


def _check_against_model(cfg: RMConfig, problems: list[str]) -> None:
    hf = read_hf_config(cfg.model.path)
    if hf is None:
        return
    where = f"{cfg.model.path}/config.json"
    check_mesh_fits_model(problems, "critic", cfg.critic.megatron, hf, where)
    max_positions = hf.get("max_position_embeddings")
    if max_positions and cfg.data.max_length > max_positions:
        problems.append(
            f"data.max_length={cfg.data.max_length} exceeds the model's max_position_embeddings={max_positions} "
            f"({where})"
        )


def translate_verl_rm_key(key: str) -> str | None:
    """verl has no reward-model trainer: its SFT trainer's keys port as they do to `megarl sft`, the mesh going
    to the critic's section."""
    translated = translate_verl_sft_key(key)
    return translated.replace("actor.megatron.", "critic.megatron.") if translated else None


RM_RECIPE = RecipeSchema(RMConfig, validate_rm_config, translate_verl_rm_key, "megarl rm")
