"""What a run's checkpoints will take on disk, estimated before it starts, and a warning when they will not fit.

`trainer.max_ckpt_to_keep` unset keeps every checkpoint, as verl's `max_actor_ckpt_to_keep: null` does (verl users
evaluate intermediate checkpoints and expect them kept), so instead of a bounded default the start compares the
checkpoints the run will keep with the free space under `trainer.output_dir`.

A trained role's checkpoint holds its weights in the training dtype and the distributed optimizer's fp32 master
weights and two Adam moments per trained parameter (megarl/models/checkpoint.py): 16 bytes a parameter in fp32
training (CPU; measured on the tiny model: 4.4 + 12.8, megatron's metadata included), 14 in bf16 training (GPU;
derived: the weights take 2 bytes there).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq

from megarl.config import ConfigError
from megarl.config.schema import MegaRLConfig
from megarl.plan.shape import ModelShape
from megarl.trainer.scaffold import total_steps

OPTIMIZER_BYTES = 12  # per trained parameter: fp32 master weight, Adam's exp_avg and exp_avg_sq


def checkpoint_bytes(cfg: MegaRLConfig, bf16: bool) -> int | None:
    """One checkpoint's size (every trained role), or None where a model's config.json does not tell it."""
    per_parameter = (2 if bf16 else 4) + OPTIMIZER_BYTES
    try:
        actor = ModelShape.from_dir(cfg.model.path)
        critic = ModelShape.from_dir(cfg.critic.model.path, "critic.model.path") if cfg.use_critic else None
    except ConfigError:
        return None
    lora = cfg.actor.lora
    trained = (actor.layers * actor.lora_layer_parameters(1, lora.rank, lora.target_modules) if lora.rank
               else actor.parameters)
    if critic is not None:
        trained += critic.gpu_parameters(1, 1, value_head=True)
    return trained * per_parameter


def saves_after(cfg: MegaRLConfig, start: int) -> int:
    """How many checkpoints the run saves after step `start`: every trainer.save_freq steps and at the last."""
    trainer = cfg.trainer
    if trainer.save_freq <= 0:
        return 0
    rows = sum(pq.ParquetFile(Path(f).expanduser()).metadata.num_rows for f in cfg.data.train_files)
    steps = total_steps(trainer, rows // cfg.data.generation_batch_size)
    return sum(1 for step in range(start + 1, steps + 1) if step % trainer.save_freq == 0 or step == steps)


def disk_warning(cfg: MegaRLConfig, bf16: bool, start: int = 0, free: int | None = None) -> str | None:
    """A line when the checkpoints the run keeps (with one more being written before the oldest is pruned) need more
    than the `free` bytes (default: the free space of trainer.output_dir's filesystem); None when they fit."""
    size, saves = checkpoint_bytes(cfg, bf16), saves_after(cfg, start)
    if not size or not saves:
        return None
    where = _existing(Path(cfg.trainer.output_dir).expanduser())
    free = shutil.disk_usage(where).free if free is None else free
    keep = cfg.trainer.max_ckpt_to_keep
    held = saves if keep is None else min(saves, keep + 1)
    if held * size <= free:
        return None
    fits = free // size - 1  # checkpoints kept while one more is written
    if keep is None:
        said = (f"trainer.save_freq={cfg.trainer.save_freq} saves {saves} checkpoints of about {_size(size)} each "
                f"({_size(saves * size)}; trainer.max_ckpt_to_keep unset keeps every one, as in verl)")
    else:
        said = (f"trainer.max_ckpt_to_keep={keep} holds {held} checkpoints of about {_size(size)} each while a save "
                f"is written ({_size(held * size)})")
    fix = (f"set trainer.max_ckpt_to_keep={fits} (what fits)" if fits >= 1 else "not even one fits there: free space")
    return f"warning: {said}, but {where} has {_size(free)} free: {fix}, or point trainer.output_dir at a larger disk"


def _existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists (the output directory is made when the run starts)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _size(size: int) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size / 1e6:.3g} MB"
