"""The reward-model loop, written against the controller (the same under Ray and under torchrun): epochs of global
batches of rankings, one optimizer step each, the held-out rankings' loss and accuracy now and then, and the HF
sequence-classification checkpoint at the end."""

from __future__ import annotations

import time
from pathlib import Path

from megarl.config.rm_schema import RMConfig
from megarl.data.dataset import DataError, PromptLoader
from megarl.data.ranking_dataset import RankingColumns, RankingDataset, ranking_batch
from megarl.placement import MAIN_POOL, main_pool
from megarl.trainer.metrics import MetricsLogger, check_loggers
from megarl.trainer.scaffold import endless, load_tokenizer, total_steps, validates_at
from megarl.workers.inputs import rm_inputs
from megarl.workers.rm_trainer import RMTrainerWorker
from parallel.controller import start_cluster

HF_DIR_NAME = "hf"


def load_rankings(cfg: RMConfig, files: list[str], tokenizer) -> RankingDataset:
    return RankingDataset(files, tokenizer, RankingColumns.of(cfg.data), cfg.data.max_length)


def train_rm(cfg: RMConfig) -> Path:
    """Train, write `{trainer.output_dir}/hf` and return its path."""
    check_loggers(cfg)
    tokenizer = load_tokenizer(cfg.model)
    train_set = load_rankings(cfg, cfg.data.train_files, tokenizer)
    if len(train_set) < cfg.data.train_batch_size:
        raise DataError(f"data.train_batch_size={cfg.data.train_batch_size} is more than the {len(train_set)} "
                        "rankings in data.train_files: lower it")
    val_set = load_rankings(cfg, cfg.data.val_files, tokenizer) if cfg.data.val_files else None
    loader = PromptLoader(train_set, cfg.data.train_batch_size, shuffle=cfg.data.shuffle, seed=cfg.trainer.seed)
    steps = total_steps(cfg.trainer, len(loader))
    with start_cluster([main_pool(cfg.trainer)], cfg.trainer.launcher, cfg.trainer.collective_timeout_s) as cluster:
        worker = cluster[MAIN_POOL].spawn("rm", RMTrainerWorker, rm_inputs(cfg, steps))
        with MetricsLogger(cfg, steps, cluster.is_driver) as logger:
            batches = endless(loader)
            for step in range(1, steps + 1):
                start = time.perf_counter()
                metrics = worker.train_batch(ranking_batch(next(batches)))[0]
                metrics["train/epoch"] = (step - 1) // len(loader) + 1
                metrics["timing_s/step"] = time.perf_counter() - start
                if val_set is not None and validates_at(step, steps, cfg.trainer.test_freq):
                    metrics.update(validate(worker, val_set, cfg.validation_batch_size))
                logger.log(step, metrics)
        # Absolute: a Ray worker's working directory need not be the driver's.
        hf_dir = Path(worker.save_hf(str(Path(cfg.trainer.output_dir).resolve() / HF_DIR_NAME)))
        if cluster.is_driver:
            print(f"reward model written to {hf_dir} (a HF sequence classifier; also a critic's model.path)",
                  flush=True)
    return hf_dir


def validate(worker, dataset: RankingDataset, batch_size: int) -> dict[str, float]:
    """`val/rm/loss` and `val/rm/accuracy`: the means over every ranking of `dataset`, in batches of `batch_size`."""
    totals = {"loss": 0.0, "accuracy": 0.0, "rankings": 0.0}
    for items in PromptLoader(dataset, batch_size, shuffle=False, drop_last=False):
        for part in worker.eval_batch(ranking_batch(items, multiple_of=worker.dp_size)):
            totals = {key: value + part[key] for key, value in totals.items()}
    return {f"val/rm/{key}": totals[key] / totals["rankings"] for key in ("loss", "accuracy")}
