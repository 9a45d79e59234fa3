"""`megarl rm --recipe recipes/NAME.yaml key.sub=value ...` (also `python -m megarl.rm`): reward-model training on
ranked responses (InstructGPT's second stage). It writes a HF sequence-classification checkpoint to
`{trainer.output_dir}/hf`, which scores responses and which an RL recipe's critic can start from."""

from __future__ import annotations

from functools import partial
from typing import Sequence

from megarl.config import RM_RECIPE, check_inputs_exist
from megarl.config.rm_schema import RMConfig
from megarl.data.ranking_dataset import RankingColumns, check_ranking_file
from megarl.models.tokenizer import load_tokenizer
from megarl.process_exit import exit_process
from megarl.recipe_command import run_recipe_command
from megarl.trainer.scaffold import saved_at_end
from parallel.controller import WorkerError
from parallel.launcher import resolve_launcher


def check_runnable(cfg: RMConfig) -> None:
    check_inputs_exist([("model.path", cfg.model.path)], cfg.data.train_files, cfg.data.val_files,
                       partial(check_ranking_file, columns=RankingColumns.of(cfg.data)))
    load_tokenizer(cfg.model)


def describe(cfg: RMConfig) -> str:
    return (f"launcher: {resolve_launcher(cfg.trainer.launcher)} (trainer.launcher={cfg.trainer.launcher}), "
            f"{cfg.world_size} GPUs, data parallel size {cfg.dp_size}")


def run(cfg: RMConfig) -> None:
    from megarl.trainer.rm_loop import train_rm

    train_rm(cfg)


def main(argv: Sequence[str] | None = None) -> int:
    return run_recipe_command(argv, RM_RECIPE, "Reward-model training on ranked responses. Overrides use dotted "
                              "keys: megarl rm --recipe R.yaml optim.lr=9e-6", check=check_runnable,
                              describe=describe, run=run, failures=(WorkerError,), saved=saved_at_end)


if __name__ == "__main__":
    exit_process(main())
