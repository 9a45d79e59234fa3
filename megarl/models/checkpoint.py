"""Model checkpoints in megatron's distributed format (any parallel layout can load what another saved),
kept beside the HF config and tokenizer files they were built from so they can be exported on their own.

    DIR/model/     megatron dist_checkpointing of the weights
    DIR/hf/        config.json, generation_config.json, tokenizer files of the source checkpoint
    DIR/role.json  {"role": "actor" | "critic"}
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch.distributed as dist
from megatron.core import dist_checkpointing
from megatron.core.utils import unwrap_model

HF_METADATA = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja")


def _sharded_state_dict(model: list) -> dict:
    if len(model) != 1:
        raise NotImplementedError("virtual pipeline stages are not supported by model checkpoints yet")
    return unwrap_model(model[0]).sharded_state_dict()


def save_model_checkpoint(role, directory: str | Path) -> None:
    """Every rank calls this; each writes its own shards."""
    directory = Path(directory)
    if dist.get_rank() == 0:
        (directory / "model").mkdir(parents=True, exist_ok=True)
        copy_hf_metadata(role.bridge.hf_path, directory / "hf")
        (directory / "role.json").write_text(json.dumps({"role": role.role}))
    dist.barrier()
    dist_checkpointing.save(_sharded_state_dict(role.model), str(directory / "model"))
    dist.barrier()


def load_model_checkpoint(role, directory: str | Path) -> None:
    """Load weights saved by `save_model_checkpoint` (in any layout) into `role`'s model; the optimizer's
    own fp32 copies are refreshed so the next step starts from the loaded weights."""
    directory = Path(directory) / "model"
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} is not a megarl model checkpoint (no model/ directory)")
    state = dist_checkpointing.load(_sharded_state_dict(role.model), str(directory))
    unwrap_model(role.model[0]).load_state_dict(state, strict=False)
    if role.optimizer is not None:
        role.optimizer.reload_model_params()


def checkpoint_role(directory: str | Path) -> str:
    path = Path(directory) / "role.json"
    if not path.is_file():
        raise FileNotFoundError(f"{directory} is not a megarl model checkpoint (no role.json)")
    return json.loads(path.read_text())["role"]


def copy_hf_metadata(source: str | Path, target: str | Path) -> None:
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    for name in HF_METADATA:
        if (Path(source) / name).is_file():
            shutil.copy2(Path(source) / name, target / name)
