"""Consistency checks across a loaded SFT config (each problem names its key and the fix), and the SFT recipe
schema that `load_config` loads with them."""

from __future__ import annotations

from megarl.config.errors import ConfigError
from megarl.config.loader import RecipeSchema
from megarl.config.ranges import check_optim
from megarl.config.sft_schema import SFTConfig
from megarl.config.validate import (
    LR_DECAY_STYLES,
    check_choice,
    check_megatron_choices,
    check_mesh_fits_model,
    check_model_type,
    check_positive,
    check_run_choices,
    divisors,
    megatron_sizes,
    read_hf_config,
    run_sizes,
)
from megarl.config.verl_sft_keys import port_verl_sft_key
from megarl.data.sft_dataset import SFT_TRUNCATIONS


def validate_sft_config(cfg: SFTConfig) -> None:
    problems: list[str] = []
    _check_choices(cfg, problems)
    if not _check_sizes(cfg, problems):
        check_trainer_batches(problems, "actor", cfg, "samples")
    check_trainer_model(problems, "actor", cfg)
    if problems:
        raise ConfigError(problems)


def _check_choices(cfg: SFTConfig, problems: list[str]) -> None:
    check_choice(problems, "data.truncation", cfg.data.truncation, SFT_TRUNCATIONS)
    check_choice(problems, "optim.lr_decay_style", cfg.optim.lr_decay_style, LR_DECAY_STYLES)
    check_megatron_choices(problems, "actor.megatron", cfg.actor.megatron)
    check_optim(problems, "optim", cfg.optim)
    check_run_choices(problems, cfg.trainer)
    if not cfg.data.response_key:
        problems.append("data.response_key is empty: name the column holding the responses, e.g. extra_info.answer")


def _check_sizes(cfg: SFTConfig, problems: list[str]) -> bool:
    """Whether a size that must be positive is not (then the batch arithmetic is skipped)."""
    positive = {
        "data.max_length": cfg.data.max_length,
        "data.train_batch_size": cfg.data.train_batch_size,
        "data.micro_batch_size_per_gpu": cfg.data.micro_batch_size_per_gpu,
        "data.max_token_len_per_gpu": cfg.data.max_token_len_per_gpu,
        **run_sizes(cfg.trainer),
        **megatron_sizes("actor.megatron", cfg.actor.megatron),
    }
    return check_positive(problems, positive)


def check_trainer_batches(problems: list[str], role: str, cfg, unit: str) -> None:
    """A one-model trainer's (`megarl sft`, `megarl rm`) batch over its ranks: `role`.megatron's mesh over the
    GPUs, `data.train_batch_size` over data-parallel ranks, micro-batches of `unit` (what a batch counts)."""
    mp = getattr(cfg, role).megatron.model_parallel_size
    if cfg.world_size % mp:
        problems.append(
            f"{role}.megatron: tensor × pipeline × context parallel = {mp} does not divide the {cfg.world_size} "
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
            f"data.micro_batch_size_per_gpu={micro} does not divide the {batch // dp} {unit} each data-parallel "
            f"rank gets per step: use one of {divisors(batch // dp)}, or data.use_dynamic_bsz=true"
        )


def check_trainer_model(problems: list[str], role: str, cfg) -> None:
    """A one-model trainer's mesh and `data.max_length` against its model's config.json, where it has one."""
    hf = read_hf_config(cfg.model.path)
    if hf is None:
        return
    where = f"{cfg.model.path}/config.json"
    check_model_type(problems, "model.path", cfg.model.path, hf)
    check_mesh_fits_model(problems, role, getattr(cfg, role).megatron, hf, where, cfg.world_size)
    max_positions = hf.get("max_position_embeddings")
    if max_positions and cfg.data.max_length > max_positions:
        problems.append(
            f"data.max_length={cfg.data.max_length} exceeds the model's max_position_embeddings={max_positions} "
            f"({where})"
        )


SFT_RECIPE = RecipeSchema(SFTConfig, validate_sft_config, port_verl_sft_key, "megarl sft")
