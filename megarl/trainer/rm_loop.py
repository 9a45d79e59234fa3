"""The reward-model loop (megarl/trainer/one_model_loop.py's, with rankings, the reward-model worker and the
held-out rankings' loss and accuracy); its checkpoint is a HF sequence classifier."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from megarl.config.rm_schema import RMConfig
from megarl.data.dataset import PromptLoader
from megarl.data.ranking_dataset import RankingColumns, RankingDataset, ranking_batch
from megarl.trainer.one_model_loop import OneModelRun, train_one_model
from megarl.models.tokenizer import load_tokenizer
from megarl.workers.inputs import rm_inputs
from megarl.workers.rm_trainer import RMTrainerWorker
from parallel.controller import RoleHandle


def load_rankings(cfg: RMConfig, files: list[str], tokenizer) -> RankingDataset:
    return RankingDataset(files, tokenizer, RankingColumns.of(cfg.data), cfg.data.max_length)


def train_rm(cfg: RMConfig) -> Path:
    """Train, write `{trainer.output_dir}/hf` and return its path."""
    tokenizer = load_tokenizer(cfg.model)
    batch_size = cfg.validation_batch_size
    run = OneModelRun("rm", RMTrainerWorker, partial(rm_inputs, cfg), ranking_batch,
                      lambda worker, val_set: validate(worker, val_set, batch_size), "rankings",
                      "reward model", "a HF sequence classifier; also a critic's model.path")
    val_set = load_rankings(cfg, cfg.data.val_files, tokenizer) if cfg.data.val_files else None
    return train_one_model(cfg, run, load_rankings(cfg, cfg.data.train_files, tokenizer), val_set)


def validate(worker: RoleHandle[RMTrainerWorker], dataset: RankingDataset, batch_size: int) -> dict[str, float]:
    """`val/rm/loss` and `val/rm/accuracy`: the means over every ranking of `dataset`, in batches of `batch_size`."""
    totals = {"loss": 0.0, "accuracy": 0.0, "rankings": 0.0}
    for items in PromptLoader(dataset, batch_size, shuffle=False, drop_last=False):
        for part in worker.call(RMTrainerWorker.eval_batch, ranking_batch(items, multiple_of=worker.dp_size)):
            totals = {key: value + part[key] for key, value in totals.items()}
    return {f"val/rm/{key}": totals[key] / totals["rankings"] for key in ("loss", "accuracy")}
