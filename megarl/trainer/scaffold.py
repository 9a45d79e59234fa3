"""What the RL loop and the SFT loop share: the run's length, batches epoch after epoch, when to validate, and
printing once per run."""

from __future__ import annotations

import os
import sys
from typing import Iterator

from megarl.config.schema import RunConfig


def total_steps(run: RunConfig, batches_per_epoch: int) -> int:
    return run.total_training_steps or batches_per_epoch * run.total_epochs


def endless(loader) -> Iterator:
    """The loader's batches, epoch after epoch (it reshuffles each epoch and keeps its position for resuming)."""
    while True:
        yield from loader


def validates_at(step: int, total: int, test_freq: int) -> bool:
    """Whether step `step` of `total` ends with a validation: every `test_freq` steps (-1: never) and after the last."""
    return step == total or (test_freq > 0 and step % test_freq == 0)


def tell(line: str, stream=None) -> None:
    """Print on the process that speaks for the run: the Ray driver, or rank 0 under torchrun, where every rank
    runs the driver code and would repeat the line."""
    if os.environ.get("RANK", "0") == "0":
        print(line, file=stream or sys.stdout, flush=True)


def saved_at_end(cfg) -> str:
    """What a stopped one-model run (`megarl sft`, `megarl rm`) leaves: nothing, its model is written at its end."""
    return (f"it writes its model only at its end ({cfg.trainer.output_dir}/hf), so starting the same command again "
            "starts afresh")
