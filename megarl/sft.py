"""`megarl sft --recipe recipes/NAME.yaml key.sub=value ...` (also `python -m megarl.sft`): supervised fine-tuning
of the policy (InstructGPT's first stage). It writes a HF checkpoint to `{trainer.output_dir}/hf`, which an RL
recipe takes as its `model.path`."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from megarl.config import SFT_RECIPE, ConfigError, check_inputs_exist, describe_keys, load_config, save_config
from megarl.data.dataset import DataError
from parallel.controller import WorkerError, resolve_launcher


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="megarl sft",
        description="Supervised fine-tuning before RL. Overrides use dotted keys: "
        "megarl sft --recipe R.yaml optim.lr=2e-5",
    )
    parser.add_argument("--recipe", help="SFT recipe YAML (defaults apply to every key it leaves out)")
    parser.add_argument("--dry-run", action="store_true", help="validate, write the resolved config, and stop")
    parser.add_argument("--help-keys", action="store_true", help="list every config key with its default")
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.help_keys:
        print(describe_keys(SFT_RECIPE))
        return 0
    try:
        cfg = load_config(args.recipe, args.overrides, SFT_RECIPE)
        check_inputs_exist([("model.path", cfg.model.path)], cfg.data.train_files, cfg.data.val_files)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    path = save_config(cfg, cfg.trainer.output_dir)
    print(f"resolved config written to {path}")
    print(f"launcher: {resolve_launcher(cfg.trainer.launcher)} (trainer.launcher={cfg.trainer.launcher}), "
          f"{cfg.world_size} GPUs, data parallel size {cfg.dp_size}")
    if args.dry_run:
        return 0
    from megarl.trainer.sft_loop import train_sft

    try:
        train_sft(cfg)
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except WorkerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
