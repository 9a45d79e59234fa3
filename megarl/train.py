"""`megarl train --recipe recipes/NAME.yaml key.sub=value ...` (also `python -m megarl.train`)."""

from __future__ import annotations

import sys
from functools import partial
from typing import Sequence

from megarl.config import RL_RECIPE, ConfigError, MegaRLConfig, check_inputs_exist
from megarl.data.dataset import read_rl_file
from megarl.data.retemplate import retemplate_source
from megarl.models.tokenizer import load_tokenizer
from megarl.placement import describe_placement
from megarl.plan import check_memory
from megarl.plan.machine import gpu_memory_gib
from megarl.process_exit import exit_process
from megarl.recipe_command import run_recipe_command
from megarl.rewards.function import RewardFunctionSpecError, load_reward_function
from megarl.rewards.scorer import RewardFunctionError
from megarl.rollout.base import EngineFailure
from megarl.trainer.checkpoint import check_resume_layout, resume_candidate, saved_for_resume, saved_step
from megarl.trainer.ckpt_disk import disk_warning
from megarl.trainer.ckpt_manifest import IncompleteCheckpoint
from megarl.trainer.health import HealthStop
from megarl.trainer.scaffold import tell
from parallel.controller import WorkerError


def check_runnable(cfg: MegaRLConfig, gpu_gib: float | None = None) -> None:
    """What a run needs on disk: the model directories, the data files (every row's prompt), a tokenizer that encodes
    text and fits the model's vocabulary, and the reward function (imported here, so that a missing name or an import
    error inside it stops `--dry-run` too); the checkpoints (`check_checkpoints`); then, on a machine with GPUs,
    that every phase fits in their memory (megarl/plan; `gpu_gib`: one GPU's memory, instead of asking nvidia-smi).
    Runs before any worker starts, for `--dry-run` and launches alike."""
    models = [("model.path", cfg.model.path)]
    if cfg.use_critic and cfg.critic.model.path != cfg.model.path:
        models.append(("critic.model.path", cfg.critic.model.path))
    if cfg.reward.model.path:
        models.append(("reward.model.path", cfg.reward.model.path))
    check_inputs_exist(models, cfg.data.train_files, cfg.data.val_files,
                       partial(read_rl_file, prompt_key=cfg.data.prompt_key))
    load_tokenizer(cfg.model)
    if cfg.reward.model.path:
        check_reward_model_tokenizer(cfg)
    try:
        load_reward_function(cfg.reward.function)
    except RewardFunctionSpecError as e:
        raise ConfigError(str(e)) from e
    gpu_gib = gpu_gib if gpu_gib is not None else gpu_memory_gib()
    check_checkpoints(cfg, bf16=gpu_gib is not None)
    check_memory(cfg, gpu_gib)


def check_checkpoints(cfg: MegaRLConfig, bf16: bool) -> None:
    """A checkpoint the run would resume from was saved at the recipe's parallel sizes; one warning line when the
    checkpoints the run keeps will not fit on the output directory's disk (`bf16`: the weights' dtype, on GPUs)."""
    resume_from = resume_candidate(cfg)
    if resume_from is not None:
        check_resume_layout(cfg, resume_from)
    warning = disk_warning(cfg, bf16, saved_step(resume_from) if resume_from is not None else 0)
    if warning:
        tell(warning, sys.stderr)


def check_reward_model_tokenizer(cfg: MegaRLConfig) -> None:
    """The reward model's tokenizer loads and can end a response (its inputs may be re-encoded with it)."""
    model = cfg.reward.model
    try:
        retemplate_source(cfg.model.tokenizer_path or cfg.model.path, model.path, model.chat_template,
                          cfg.model.trust_remote_code)
    except (OSError, ValueError) as e:
        raise ConfigError(f"reward.model.path={model.path}: its tokenizer does not load or cannot end a response "
                          f"({e}); save the tokenizer with the reward model") from e


def run(cfg: MegaRLConfig) -> None:
    from megarl.trainer.loop import train

    train(cfg)


def main(argv: Sequence[str] | None = None, gpu_gib: float | None = None) -> int:
    """`gpu_gib`: one GPU's memory for the memory check (None: nvidia-smi's answer; no check without GPUs)."""
    return run_recipe_command(argv, RL_RECIPE, "Run an RL recipe. Overrides use dotted keys: "
                              "megarl train --recipe R.yaml rollout.n=8",
                              check=partial(check_runnable, gpu_gib=gpu_gib), describe=describe_placement, run=run,
                              failures=(WorkerError, RewardFunctionError, HealthStop, EngineFailure,
                                        IncompleteCheckpoint), saved=saved_for_resume)


if __name__ == "__main__":
    exit_process(main())
