"""The loop of the one-model trainers (`megarl sft`, `megarl rm`), written against the controller (the same under
Ray and under torchrun): epochs of global batches, one optimizer step each, validation now and then, and the HF
checkpoint the worker writes at the end."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from megarl.data.dataset import DataError, PromptLoader
from megarl.placement import MAIN_POOL, main_pool
from megarl.trainer.metrics import MetricsLogger, check_loggers
from megarl.trainer.scaffold import endless, total_steps, validates_at
from megarl.workers import OneModelWorker
from parallel.controller import RoleHandle
from parallel.launcher import start_cluster

HF_DIR_NAME = "hf"


@dataclass(frozen=True)
class OneModelRun:
    """What differs between the one-model trainers."""

    role: str  # the worker's name, e.g. "sft"
    worker: type[OneModelWorker]
    inputs: Callable[[int], Any]  # total steps → the worker's typed inputs
    to_batch: Callable[..., Any]  # loader items → the worker's batch (`multiple_of` pads for validation)
    validate: Callable[[RoleHandle[Any], Any], dict[str, float]]  # (the worker's handle, validation set) → metrics
    unit: str  # what the data holds, for messages ("samples", "rankings")
    written: str  # what the saved checkpoint is ("SFT model")
    use: str  # what it is for, said after its path


def train_one_model(cfg, run: OneModelRun, train_set, val_set: Optional[Any]) -> Path:
    """Train, write `{trainer.output_dir}/hf` and return its path."""
    check_loggers(cfg)
    if len(train_set) < cfg.data.train_batch_size:
        raise DataError(f"data.train_batch_size={cfg.data.train_batch_size} is more than the {len(train_set)} "
                        f"{run.unit} in data.train_files: lower it")
    loader = PromptLoader(train_set, cfg.data.train_batch_size, shuffle=cfg.data.shuffle, seed=cfg.trainer.seed)
    steps = total_steps(cfg.trainer, len(loader))
    with start_cluster([main_pool(cfg.trainer)], cfg.trainer.launcher, cfg.trainer.collective_timeout_s) as cluster:
        worker = cluster[MAIN_POOL].spawn(run.role, run.worker, run.inputs(steps))
        with MetricsLogger(cfg, steps, cluster.is_driver) as logger:
            batches = endless(loader)
            for step in range(1, steps + 1):
                start = time.perf_counter()
                metrics = worker.call(OneModelWorker.train_batch, run.to_batch(next(batches)))
                metrics["train/epoch"] = (step - 1) // len(loader) + 1
                metrics["timing_s/step"] = time.perf_counter() - start
                if val_set is not None and validates_at(step, steps, cfg.trainer.test_freq):
                    metrics.update(run.validate(worker, val_set))
                logger.log(step, metrics)
        # Absolute: a Ray worker's working directory need not be the driver's.
        hf_dir = Path(worker.call(OneModelWorker.save_hf, str(Path(cfg.trainer.output_dir).resolve() / HF_DIR_NAME)))
        if cluster.is_driver:
            print(f"{run.written} written to {hf_dir} ({run.use})", flush=True)
    return hf_dir
