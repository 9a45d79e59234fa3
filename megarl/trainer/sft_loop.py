"""The SFT loop, written against the controller (the same under Ray and under torchrun): epochs of global
batches, one optimizer step each, the validation loss now and then, and the HF checkpoint at the end."""

from __future__ import annotations

import time
from pathlib import Path

from megarl.config.sft_schema import SFTConfig
from megarl.data.dataset import DataError, PromptLoader
from megarl.data.sft_dataset import SFTDataset, sft_batch
from megarl.placement import MAIN_POOL, main_pool
from megarl.trainer.metrics import MetricsLogger, check_loggers
from megarl.trainer.scaffold import endless, load_tokenizer, total_steps, validates_at
from megarl.workers.inputs import sft_inputs
from megarl.workers.sft import SFTWorker
from parallel.controller import start_cluster

HF_DIR_NAME = "hf"


def load_dataset(cfg: SFTConfig, files: list[str], tokenizer) -> SFTDataset:
    data = cfg.data
    return SFTDataset(files, tokenizer, prompt_key=data.prompt_key, response_key=data.response_key,
                      max_length=data.max_length, truncation=data.truncation)


def train_sft(cfg: SFTConfig) -> Path:
    """Train, write `{trainer.output_dir}/hf` and return its path."""
    check_loggers(cfg)
    tokenizer = load_tokenizer(cfg.model)
    train_set = load_dataset(cfg, cfg.data.train_files, tokenizer)
    if len(train_set) < cfg.data.train_batch_size:
        raise DataError(f"data.train_batch_size={cfg.data.train_batch_size} is more than the {len(train_set)} "
                        "samples in data.train_files: lower it")
    val_set = load_dataset(cfg, cfg.data.val_files, tokenizer) if cfg.data.val_files else None
    loader = PromptLoader(train_set, cfg.data.train_batch_size, shuffle=cfg.data.shuffle, seed=cfg.trainer.seed)
    steps = total_steps(cfg.trainer, len(loader))
    with start_cluster([main_pool(cfg.trainer)], cfg.trainer.launcher, cfg.trainer.collective_timeout_s) as cluster:
        worker = cluster[MAIN_POOL].spawn("sft", SFTWorker, sft_inputs(cfg, steps))
        with MetricsLogger(cfg, steps, cluster.is_driver) as logger:
            batches = endless(loader)
            for step in range(1, steps + 1):
                start = time.perf_counter()
                metrics = worker.train_batch(sft_batch(next(batches)))[0]
                metrics["train/epoch"] = (step - 1) // len(loader) + 1
                metrics["timing_s/step"] = time.perf_counter() - start
                if val_set is not None and validates_at(step, steps, cfg.trainer.test_freq):
                    metrics["val/loss"] = validation_loss(worker, val_set, cfg.data.train_batch_size)
                logger.log(step, metrics)
        # Absolute: a Ray worker's working directory need not be the driver's.
        hf_dir = Path(worker.save_hf(str(Path(cfg.trainer.output_dir).resolve() / HF_DIR_NAME)))
        if cluster.is_driver:
            print(f"SFT model written to {hf_dir} (use it as model.path in an RL recipe)", flush=True)
    return hf_dir


def validation_loss(worker, dataset: SFTDataset, batch_size: int) -> float:
    """The mean NLL over every response token of `dataset`, in batches of `batch_size` samples."""
    nll = tokens = 0.0
    for items in PromptLoader(dataset, batch_size, shuffle=False, drop_last=False):
        for part in worker.eval_batch(sft_batch(items, multiple_of=worker.dp_size)):
            nll, tokens = nll + part["nll"], tokens + part["tokens"]
    return nll / tokens
