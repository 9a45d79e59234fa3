"""Model and training checkpoints of a role in megatron's distributed format, kept beside the HF config and tokenizer
files they were built from so that each can be exported on its own (`megarl export`).

    DIR/model/       megatron dist_checkpointing of the weights (any parallel layout loads it)
    DIR/hf/          config.json, generation_config.json, tokenizer files of the source checkpoint
    DIR/role.json    {"role": "actor" | "critic", "layout": the tensor/pipeline/context/data-parallel sizes, "world_size"}
                     and, for a LoRA actor, "lora" (its settings) and "base_model" (the HF checkpoint it adapts)
  a training checkpoint adds:
    DIR/optimizer/   the distributed optimizer's state (dist_checkpointing) and the LR scheduler's
    DIR/rng/rank_NNNNN.json   each rank's random number generators (megarl/rng.py)
  and its save lists them all (every rank's shards and RNG files), for the manifest of the step it belongs to.

The optimizer state uses megatron's `dp_reshardable` format (megatron-LM's default: every rank writes and reads
only its own shard, no gathering), which loads into another data-parallel size but not into other tensor,
pipeline or context-parallel sizes; the layout is checked before loading.

A LoRA actor's model/ holds its adapters only: the frozen base is the HF checkpoint in role.json's "base_model".
"""

from __future__ import annotations

import json
import logging
import pickle
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist
from megatron.core import dist_checkpointing, parallel_state
from megatron.core.dist_checkpointing.core import CheckpointingException
from megatron.core.dist_checkpointing.dict_utils import nested_values
from megatron.core.dist_checkpointing.mapping import ShardedTensor, apply_factories
from megatron.core.optimizer.distrib_optimizer import HAVE_APEX_OR_TE
from megatron.core.utils import unwrap_model
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException

from megarl import rng
from megarl.models.hf_files import HF_METADATA, copy_hf_metadata
from megarl.models.lora import is_adapter

logger = logging.getLogger(__name__)

OPTIMIZER_FORMAT = {"distrib_optim_sharding_type": "dp_reshardable"}
FIXED_SIZES = ("tensor", "pipeline", "context")  # what the optimizer format cannot reshard


class CheckpointError(ValueError):
    """A checkpoint cannot be loaded into this model; the message says why and what to change."""


def save_model_checkpoint(model, directory: str | Path) -> None:
    """The weights only. Every rank calls this; each writes its own shards."""
    directory = Path(directory)
    _prepare(model, directory, ("model",))
    dist_checkpointing.save(_model_state(model), str(directory / "model"))
    dist.barrier()


def save_training_checkpoint(model, directory: str | Path) -> list[str]:
    """Weights, optimizer, LR scheduler and every rank's RNG states: all a role needs to continue training exactly.
    Every rank calls this; each writes its own shards and RNG file. Returns, on rank 0, the files the checkpoint must
    hold (relative to `directory`), for its manifest; [] on the other ranks."""
    directory = Path(directory)
    states = rng.capture()
    _prepare(model, directory, ("model", "optimizer", "rng"))
    dist_checkpointing.save(_model_state(model), str(directory / "model"))
    dist_checkpointing.save(_optimizer_state(model, is_loading=False), str(directory / "optimizer"))
    (directory / "rng" / f"rank_{dist.get_rank():05d}.json").write_text(json.dumps(states))
    dist.barrier()
    return training_checkpoint_files(directory, dist.get_world_size()) if dist.get_rank() == 0 else []


def training_checkpoint_files(directory: Path, world_size: int) -> list[str]:
    """What a complete training checkpoint holds: role.json, the copied HF files, each part's torch metadata and
    every shard file it names (every writing rank's), megatron's metadata and common state, each rank's RNG file. A
    part whose metadata is gone names only that file."""
    files = ["role.json", *(f"hf/{name}" for name in HF_METADATA if (directory / "hf" / name).is_file())]
    for part in ("model", "optimizer"):
        try:
            shards = {item.relative_path for item in FileSystemReader(str(directory / part)).read_metadata()
                      .storage_data.values()}
        except (OSError, ValueError, pickle.UnpicklingError, EOFError):
            shards = set()
        files += [f"{part}/{name}" for name in (".metadata", "metadata.json", "common.pt", *sorted(shards))]
    return files + [f"rng/rank_{rank:05d}.json" for rank in range(world_size)]


def load_model_checkpoint(model, directory: str | Path) -> None:
    """Load weights saved by either save (in any layout) into `model` (a RoleModel); the optimizer's own fp32 copies are
    refreshed so the next step starts from the loaded weights."""
    _load_model(model, Path(directory))
    if model.optimizer is not None:
        model.optimizer.reload_model_params()


def load_training_checkpoint(model, directory: str | Path) -> None:
    """Restore what `save_training_checkpoint` wrote into a freshly built trained model."""
    directory = Path(directory)
    saved = _read_role(directory)
    if saved["role"] != model.name:
        raise CheckpointError(f"{directory} holds a {saved['role']} checkpoint, not a {model.name} one")
    if not (directory / "optimizer").is_dir():
        raise CheckpointError(f"{directory} holds weights only (no optimizer/): it can be exported or trained from "
                              "as a model, not resumed")
    layout, here = saved.get("layout", {}), _layout()
    if any(layout.get(dim) != here[dim] for dim in FIXED_SIZES):
        raise CheckpointError(
            f"{directory} was saved with parallel sizes {layout}; its optimizer state loads only into the same "
            f"tensor, pipeline and context-parallel sizes (the data-parallel size may change), this run has {here}. "
            f"Set {model.name}.megatron.* to the saved sizes to resume"
        )
    _load_model(model, directory)
    with _reading(directory / "optimizer"):
        state = dist_checkpointing.load(_optimizer_state(model, is_loading=True), str(directory / "optimizer"))
    with torch.no_grad():  # fp32 training: the optimizer's main parameters are views of the model's
        model.optimizer.load_state_dict(state["optimizer"])
    _restore_adam_steps(model.optimizer)
    model.scheduler.load_state_dict(state["scheduler"])
    rank_file = directory / "rng" / f"rank_{dist.get_rank():05d}.json"
    if saved.get("world_size") != dist.get_world_size():
        logger.warning("%s was saved by %s ranks, this run has %d: random number generators start afresh",
                       directory, saved.get("world_size"), dist.get_world_size())
    elif not rank_file.is_file():
        logger.warning("%s is missing: this rank's random number generators start afresh", rank_file)
    else:
        rng.restore(json.loads(rank_file.read_text()))


def checkpoint_role(directory: str | Path) -> str:
    return _read_role(Path(directory))["role"]


def checkpoint_lora(directory: str | Path) -> tuple[dict | None, str | None]:
    """A LoRA checkpoint's settings and base model directory; (None, None) for a full model."""
    saved = _read_role(Path(directory))
    return saved.get("lora"), saved.get("base_model")


def lora_settings(model) -> dict | None:
    adapter = model.bridge.adapter
    if adapter is None:
        return None
    return {"rank": adapter.rank, "alpha": adapter.alpha, "dropout": adapter.dropout,
            "target_modules": list(model.bridge.adapter_targets)}


def _read_role(directory: Path) -> dict:
    path = directory / "role.json"
    if not path.is_file():
        raise FileNotFoundError(f"{directory} is not a megarl model checkpoint (no role.json)")
    return json.loads(path.read_text())


def _layout() -> dict[str, int]:
    return {"tensor": parallel_state.get_tensor_model_parallel_world_size(),
            "pipeline": parallel_state.get_pipeline_model_parallel_world_size(),
            "context": parallel_state.get_context_parallel_world_size(),
            "data": parallel_state.get_data_parallel_world_size()}


def _prepare(model, directory: Path, parts: tuple[str, ...]) -> None:
    """Rank 0 lays out the directory; no rank writes before it has (a trainer prepares the parent first, on
    rank 0 under torchrun, so the barrier orders that too)."""
    if dist.get_rank() == 0:
        for part in parts:
            (directory / part).mkdir(parents=True, exist_ok=True)
        copy_hf_metadata(model.bridge.hf_path, directory / "hf")
        meta = {"role": model.name, "layout": _layout(), "world_size": dist.get_world_size()}
        if model.bridge.adapter is not None:
            meta.update(lora=lora_settings(model), base_model=str(Path(model.bridge.hf_path).resolve()))
        (directory / "role.json").write_text(json.dumps(meta))
    dist.barrier()


def _model_state(model) -> dict:
    """A fresh sharded state dict each time: saving and loading rewrite the one they are given. A LoRA model's
    holds its adapters only."""
    if len(model.chunks) != 1:
        raise NotImplementedError("virtual pipeline stages are not supported by model checkpoints yet")
    state = unwrap_model(model.chunks[0]).sharded_state_dict()
    if model.bridge.adapter is not None:
        state = {key: value for key, value in state.items() if is_adapter(key)}
    return state


def _optimizer_state(model, is_loading: bool) -> dict:
    optimizer = model.optimizer.sharded_state_dict(_model_state(model), is_loading=is_loading,
                                                  metadata=OPTIMIZER_FORMAT)
    return {"optimizer": optimizer, "scheduler": model.scheduler.state_dict()}


def _load_model(model, directory: Path) -> None:
    model_dir = directory / "model"
    if not model_dir.is_dir():
        raise FileNotFoundError(f"{directory} is not a megarl model checkpoint (no model/ directory)")
    saved = _read_role(directory).get("lora")
    if saved != lora_settings(model):
        raise CheckpointError(f"{directory} was saved with LoRA settings {saved} (None: full fine-tuning), this model "
                              f"has {lora_settings(model)}: set actor.lora.* as saved to load it")
    with _reading(model_dir):
        _check_shapes(_model_state(model), model_dir, model.bridge.hf_path)
        state = dist_checkpointing.load(_model_state(model), str(model_dir))
    unwrap_model(model.chunks[0]).load_state_dict(state, strict=False)


@contextmanager
def _reading(part_dir: Path):
    """Name the directory in a failure to read it: torch reports a shard cut short as a bare EOFError inside a
    CheckpointException (a BaseException, which `except Exception` misses) with no file named."""
    try:
        yield
    except CheckpointError:
        raise
    except (CheckpointException, CheckpointingException, EOFError, pickle.UnpicklingError, OSError, RuntimeError,
            ValueError) as e:
        raise CheckpointError(
            f"{part_dir} cannot be read ({_cause(e)}): a file in it is damaged or cut short. Load an earlier "
            "checkpoint (to resume a run: trainer.resume_mode=resume_path trainer.resume_from_path=<an earlier "
            "global_step_K>)"
        ) from e


def _cause(error: BaseException) -> str:
    where = ""
    if isinstance(error, CheckpointException):  # one failure per rank that failed: the first tells
        rank, (error, _) = next(iter(error.failures.items()))
        where = f" on rank {rank}"
    return f"{type(error).__name__}{where}" + (f": {error}" if str(error) else "")


def _check_shapes(sharded: dict, model_dir: Path, hf_path) -> None:
    """Compare global shapes before loading: megatron's own error for a mismatch names no model."""
    saved = dist_checkpointing.load_tensors_metadata(str(model_dir))
    apply_factories(sharded)  # e.g. the gated MLP's fused weight becomes its two halves, as saved
    mine = {t.key: tuple(t.global_shape) for t in nested_values(sharded) if isinstance(t, ShardedTensor)}
    problems = []
    for key, shape in mine.items():
        if key not in saved:
            problems.append(f"{key} is not in the checkpoint")
        elif tuple(saved[key].global_shape) != shape:
            problems.append(f"{key} is {tuple(saved[key].global_shape)} in the checkpoint, {shape} in this model")
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise CheckpointError(
            f"{model_dir.parent} holds a model of another shape than {hf_path}: {shown}. Load it into the model "
            "it was trained from (the config in its hf/ directory)"
        )


def _restore_adam_steps(optimizer) -> None:
    """megatron (0.16) loads torch Adam's step into its param groups, then copies the loading side's (zero) step over
    the parameters' one, which it shares among them (torch Adam would advance a shared step once per parameter):
    each parameter gets its own tensor holding the loaded step."""
    if HAVE_APEX_OR_TE:
        return
    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        for group in opt.optimizer.param_groups:
            for param in group["params"]:
                opt.optimizer.state[param]["step"] = torch.tensor(float(group["step"]))
