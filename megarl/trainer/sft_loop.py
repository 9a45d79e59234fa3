"""The SFT loop (megarl/trainer/one_model_loop.py's, with SFT's data, worker and validation loss)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from megarl.config.sft_schema import SFTConfig
from megarl.data.dataset import PromptLoader
from megarl.data.sft_dataset import SFTDataset, sft_batch
from megarl.trainer.one_model_loop import OneModelRun, train_one_model
from megarl.models.tokenizer import load_tokenizer
from megarl.workers.inputs import sft_inputs
from megarl.workers.sft import SFTWorker
from parallel.controller import RoleHandle


def load_dataset(cfg: SFTConfig, files: list[str], tokenizer) -> SFTDataset:
    data = cfg.data
    return SFTDataset(files, tokenizer, prompt_key=data.prompt_key, response_key=data.response_key,
                      max_length=data.max_length, truncation=data.truncation)


def train_sft(cfg: SFTConfig) -> Path:
    """Train, write `{trainer.output_dir}/hf` and return its path."""
    tokenizer = load_tokenizer(cfg.model)
    batch_size = cfg.data.train_batch_size
    run = OneModelRun("sft", SFTWorker, partial(sft_inputs, cfg), sft_batch,
                      lambda worker, val_set: {"val/loss": validation_loss(worker, val_set, batch_size)},
                      "samples", "SFT model", "use it as model.path in an RL recipe")
    val_set = load_dataset(cfg, cfg.data.val_files, tokenizer) if cfg.data.val_files else None
    return train_one_model(cfg, run, load_dataset(cfg, cfg.data.train_files, tokenizer), val_set)


def validation_loss(worker: RoleHandle[SFTWorker], dataset: SFTDataset, batch_size: int) -> float:
    """The mean NLL over every response token of `dataset`, in batches of `batch_size` samples."""
    nll = tokens = 0.0
    for items in PromptLoader(dataset, batch_size, shuffle=False, drop_last=False):
        for part in worker.call(SFTWorker.eval_batch, sft_batch(items, multiple_of=worker.dp_size)):
            nll, tokens = nll + part["nll"], tokens + part["tokens"]
    return nll / tokens
