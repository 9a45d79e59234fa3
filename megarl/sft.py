"""`megarl sft --recipe recipes/NAME.yaml key.sub=value ...` (also `python -m megarl.sft`): supervised fine-tuning
of the policy (InstructGPT's first stage). It writes a HF checkpoint to `{trainer.output_dir}/hf`, which an RL
recipe takes as its `model.path`."""

from __future__ import annotations

from functools import partial
from typing import Sequence

from megarl.config import SFT_RECIPE, check_inputs_exist
from megarl.config.sft_schema import SFTConfig
from megarl.data.sft_dataset import check_sft_columns
from megarl.models.tokenizer import load_tokenizer
from megarl.process_exit import exit_process
from megarl.recipe_command import run_recipe_command
from megarl.trainer.scaffold import saved_at_end
from parallel.controller import WorkerError
from parallel.launcher import resolve_launcher


def check_runnable(cfg: SFTConfig) -> None:
    check_inputs_exist([("model.path", cfg.model.path)], cfg.data.train_files, cfg.data.val_files,
                       partial(check_sft_columns, prompt_key=cfg.data.prompt_key, response_key=cfg.data.response_key))
    load_tokenizer(cfg.model)


def describe(cfg: SFTConfig) -> str:
    return (f"launcher: {resolve_launcher(cfg.trainer.launcher)} (trainer.launcher={cfg.trainer.launcher}), "
            f"{cfg.world_size} GPUs, data parallel size {cfg.dp_size}")


def run(cfg: SFTConfig) -> None:
    from megarl.trainer.sft_loop import train_sft

    train_sft(cfg)


def main(argv: Sequence[str] | None = None) -> int:
    return run_recipe_command(argv, SFT_RECIPE, "Supervised fine-tuning before RL. Overrides use dotted keys: "
                              "megarl sft --recipe R.yaml optim.lr=2e-5", check=check_runnable, describe=describe,
                              run=run, failures=(WorkerError,), saved=saved_at_end)


if __name__ == "__main__":
    exit_process(main())
