"""Consistency checks across a loaded reward-model config (each problem names its key and the fix), and the
reward-model recipe schema that `load_config` loads with them."""

from __future__ import annotations

from dataclasses import replace

from megarl.config.errors import ConfigError
from megarl.config.loader import RecipeSchema
from megarl.config.ranges import check_optim
from megarl.config.rm_schema import RMConfig
from megarl.config.validate import (
    LR_DECAY_STYLES,
    check_choice,
    check_megatron_choices,
    check_positive,
    check_run_choices,
    megatron_sizes,
    run_sizes,
)
from megarl.config.sft_validate import check_trainer_batches, check_trainer_model
from megarl.config.verl_keys import Port
from megarl.config.verl_sft_keys import port_verl_sft_key


def validate_rm_config(cfg: RMConfig) -> None:
    problems: list[str] = []
    _check_choices(cfg, problems)
    if not _check_sizes(cfg, problems):
        check_trainer_batches(problems, "critic", cfg, "rankings")
    check_trainer_model(problems, "critic", cfg)
    if problems:
        raise ConfigError(problems)


def _check_choices(cfg: RMConfig, problems: list[str]) -> None:
    check_choice(problems, "optim.lr_decay_style", cfg.optim.lr_decay_style, LR_DECAY_STYLES)
    check_megatron_choices(problems, "critic.megatron", cfg.critic.megatron)
    check_optim(problems, "optim", cfg.optim)
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


def port_verl_rm_key(key: str) -> Port | None:
    """verl has no reward-model trainer: its SFT trainer's keys port as they do to `megarl sft`, the mesh going
    to the critic's section."""
    port = port_verl_sft_key(key)
    if port is None or port.key is None:
        return port
    return replace(port, key=port.key.replace("actor.megatron.", "critic.megatron."))


RM_RECIPE = RecipeSchema(RMConfig, validate_rm_config, port_verl_rm_key, "megarl rm")
