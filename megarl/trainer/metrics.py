"""Where a step's metrics go: `metrics.jsonl` in the output directory (one JSON object per step, always) and a
compact console line; written by one process (the Ray driver, or torchrun's rank 0)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from megarl.config import ConfigError
from megarl.config.schema import MegaRLConfig

AVAILABLE = ("console",)
CONSOLE_KEYS = ("critic/score/mean", "actor/pg_loss", "actor/entropy", "actor/ppo_kl", "critic/vf_loss",
                "response_length/mean", "rollout/logprob_mult_error", "train/loss", "train/grad_norm", "train/lr",
                "timing_s/step")


def check_loggers(cfg: MegaRLConfig) -> None:
    missing = [name for name in cfg.trainer.logger if name not in AVAILABLE]
    if missing:
        raise ConfigError([f"trainer.logger: {missing} not available in this build yet; use {list(AVAILABLE)} "
                           "(metrics.jsonl is always written)"])


class MetricsLogger:
    def __init__(self, cfg: MegaRLConfig, total_steps: int, is_writer: bool):
        self.total_steps, self.is_writer = total_steps, is_writer
        self.console = "console" in cfg.trainer.logger
        self.path = Path(cfg.trainer.output_dir) / "metrics.jsonl"
        if is_writer:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if not self.is_writer:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")
        if self.console:
            shown = " ".join(f"{key.split('/', 1)[-1]}={metrics[key]:.4g}" for key in CONSOLE_KEYS if key in metrics)
            print(f"step {step}/{self.total_steps} {shown}", file=sys.stdout, flush=True)
