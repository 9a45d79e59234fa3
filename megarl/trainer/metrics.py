"""Where a step's metrics go, written by one process (the Ray driver, or torchrun's rank 0):
- `metrics.jsonl` in the output directory: one JSON object per step, always;
- `console`: a progress bar (on a terminal) and a compact line every `trainer.log_interval` steps, at validations
  and at the last step;
- `tensorboard`: event files in `{output_dir}/tensorboard` (`TENSORBOARD_DIR` overrides, as in verl);
- `wandb`: project/experiment names from the recipe and the resolved config; `WANDB_MODE=offline` works
  without an account or network.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from megarl.config import ConfigError

CONSOLE_KEYS = {"critic/score/mean": "score", "actor/pg_loss": "pg_loss", "actor/entropy": "entropy",
                "actor/ppo_kl": "ppo_kl", "critic/vf_loss": "vf_loss", "response_length/mean": "response_len",
                "rollout/logprob_mult_error": "logprob_err", "tool/calls_per_sample": "tool_calls",
                "train/loss": "loss", "train/grad_norm": "grad_norm",
                "train/lr": "lr", "rm/loss": "loss", "rm/accuracy": "accuracy", "val/rm/accuracy": "val_accuracy",
                "timing_s/step": "step_s"}
INSTALL = {"tensorboard": "pip install tensorboard", "wandb": "pip install wandb"}


def check_loggers(cfg) -> None:
    """Loggers whose package is missing fail before any work starts (the recipe's validation checked the names)."""
    problems = []
    for name in cfg.trainer.logger:
        if name in INSTALL and not _importable(name):
            problems.append(f"trainer.logger: {name} is not installed ({INSTALL[name]}), or drop it from the list")
    if problems:
        raise ConfigError(problems)


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def console_line(step: int, total: int, metrics: dict[str, float]) -> str:
    shown = " ".join(f"{label}={metrics[key]:.4g}" for key, label in CONSOLE_KEYS.items() if key in metrics)
    shown += "".join(f" {key}={value:.4g}" for key, value in metrics.items() if key.startswith("val-core/"))
    return f"step {step}/{total} {shown}"


class MetricsLogger:
    """`cfg` needs `trainer.{logger, output_dir, project_name, experiment_name}` (RL and SFT recipes have them)."""

    def __init__(self, cfg, total_steps: int, is_writer: bool, start_step: int = 0):
        """`start_step`: the step a resumed run continues after; metrics.jsonl keeps the lines up to it (a killed
        run may have logged steps after its last checkpoint, which the resumed run logs again)."""
        self.total_steps, self.is_writer = total_steps, is_writer
        trainer = cfg.trainer
        self.path = Path(trainer.output_dir) / "metrics.jsonl"
        self.progress = self.tensorboard = self.wandb = None
        if not is_writer:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            kept = [line for line in self.path.read_text().splitlines() if json.loads(line)["step"] <= start_step]
            self.path.write_text("".join(line + "\n" for line in kept))
        self.interval = trainer.log_interval or max(1, total_steps // 20)
        if "console" in trainer.logger:
            from tqdm import tqdm

            # Redirected to a file, a bar would fill it with carriage-return updates: lines only there.
            self.progress = tqdm(total=total_steps, initial=start_step, desc=trainer.experiment_name, unit="step",
                                 file=sys.stderr, dynamic_ncols=True, disable=not sys.stderr.isatty())
        if "tensorboard" in trainer.logger:
            from torch.utils.tensorboard import SummaryWriter

            self.tensorboard = SummaryWriter(os.environ.get("TENSORBOARD_DIR", str(self.path.parent / "tensorboard")))
        if "wandb" in trainer.logger:
            import wandb

            try:
                self.wandb = wandb.init(project=trainer.project_name, name=trainer.experiment_name,
                                        dir=str(self.path.parent), config=dataclasses.asdict(cfg))
            except wandb.errors.UsageError as e:
                raise ConfigError(f"trainer.logger: wandb could not start ({e}); run `wandb login`, or set "
                                  "WANDB_MODE=offline to write the run locally (`wandb sync` uploads it later)") from e

    def log(self, step: int, metrics: dict[str, float]) -> None:
        """Metrics of `step` (validation before training is step 0)."""
        if not self.is_writer:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")
        if self.progress is not None:
            validated = any(key.startswith("val-core/") for key in metrics)
            if step % self.interval == 0 or step == self.total_steps or validated:
                self.progress.write(console_line(step, self.total_steps, metrics), file=sys.stdout)
            self.progress.n = step
            self.progress.refresh()
        if self.tensorboard is not None:
            for key, value in metrics.items():
                self.tensorboard.add_scalar(key, value, step)
            self.tensorboard.flush()
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Close the progress bar and flush tensorboard and wandb, also when the run fails."""
        for sink, stop in ((self.progress, "close"), (self.tensorboard, "close"), (self.wandb, "finish")):
            if sink is not None:
                getattr(sink, stop)()
