"""A HF checkpoint directory's files: the weights as safetensors shards (and their index), written as they fill,
and the config and tokenizer files copied beside them."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Iterable

import torch
from safetensors.torch import save_file

HF_METADATA = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja")
SHARD_BYTES = 4 * 1024**3


def write_hf_checkpoint(tensors: Iterable[tuple[str, torch.Tensor]], out: str | Path, shard_bytes: int = SHARD_BYTES) -> None:
    """Stream (name, tensor) into safetensors shards of at most `shard_bytes` (one tensor may exceed it),
    each written as soon as it is full: host memory holds one shard, not the model."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    shard: dict[str, torch.Tensor] = {}
    size = total = 0
    files: list[Path] = []

    def flush():
        files.append(out / f"model-{len(files) + 1:05d}.safetensors")
        save_file(shard, str(files[-1]), metadata={"format": "pt"})
        files[-1].chmod(_default_file_mode())  # safetensors writes 0600; a model directory is shared
        weight_map.update({name: files[-1].name for name in shard})
        shard.clear()

    for name, tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if shard and size + nbytes > shard_bytes:
            flush()
            size = 0
        shard[name] = tensor.detach().to("cpu").contiguous()
        size += nbytes
        total += nbytes
    if shard or not files:
        flush()
    if len(files) == 1:
        files[0].rename(out / "model.safetensors")
        return
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2)
    )


def _default_file_mode() -> int:
    """The mode a new file gets from this process's umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def held_model_files(out: str | Path) -> list[Path]:
    """The model files (weights, their index, config) already in directory `out`."""
    out = Path(out)
    return sorted([*out.glob("*.safetensors"), *out.glob("*.safetensors.index.json"), *out.glob("config.json")])


def replace_hf_checkpoint(tensors: Iterable[tuple[str, torch.Tensor]], out: str | Path, metadata: str | Path) -> None:
    """Write `tensors` as the model in `out` (replacing the model files already there: --force, called once the
    checkpoint has loaded, so no stale shards are left beside it), with `metadata`'s config and tokenizer files."""
    for path in held_model_files(out):
        path.unlink()
    write_hf_checkpoint(tensors, out)
    copy_hf_metadata(metadata, out)


def copy_hf_metadata(source: str | Path, target: str | Path) -> None:
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    for name in HF_METADATA:
        if (Path(source) / name).is_file():
            shutil.copy2(Path(source) / name, target / name)
