"""`megarl train --recipe recipes/NAME.yaml key.sub=value ...` (also `python -m megarl.train`)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from megarl.config import ConfigError, MegaRLConfig, check_inputs_exist, describe_keys, load_config, save_config
from megarl.data.dataset import DataError
from megarl.placement import describe_placement
from megarl.rewards.scorer import RewardFunctionError
from parallel.controller import WorkerError


def check_runnable(cfg: MegaRLConfig) -> None:
    """What a run needs on disk: the model directories and the data files."""
    models = [("model.path", cfg.model.path)]
    if cfg.use_critic and cfg.critic.model.path != cfg.model.path:
        models.append(("critic.model.path", cfg.critic.model.path))
    check_inputs_exist(models, cfg.data.train_files, cfg.data.val_files)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="megarl train",
        description="Run an RL recipe. Overrides use dotted keys: megarl train --recipe R.yaml rollout.n=8",
    )
    parser.add_argument("--recipe", help="recipe YAML (defaults apply to every key it leaves out)")
    parser.add_argument("--dry-run", action="store_true", help="validate, write the resolved config, and stop")
    parser.add_argument("--help-keys", action="store_true", help="list every config key with its default")
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.help_keys:
        print(describe_keys())
        return 0
    try:
        cfg = load_config(args.recipe, args.overrides)
        check_runnable(cfg)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    path = save_config(cfg, cfg.trainer.output_dir)
    print(f"resolved config written to {path}")
    print(describe_placement(cfg))
    if args.dry_run:
        return 0
    from megarl.trainer.loop import train

    try:
        train(cfg)
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (WorkerError, RewardFunctionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
