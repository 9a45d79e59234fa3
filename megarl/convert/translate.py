"""verl's overrides → the lines of a megarl recipe: each key through megarl.config.verl_keys (the table the error
hints read), verl's defaults stated where megarl's differ, and what does not carry over, with the reason."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from omegaconf import OmegaConf

from megarl.config.errors import ConfigError
from megarl.config.loader import RL_RECIPE, RecipeSchema, parse_value
from megarl.config.sft_validate import SFT_RECIPE
from megarl.config.verl_keys import (
    MESH,
    OMIT,
    NotCarried,
    VerlRun,
    renamed,
    verl_defaults,
    warmup_steps_from_ratio,
)
from megarl.config.verl_sft_keys import VERL_SFT_DEFAULTS, VERL_SFT_WARMUP_RATIO
from megarl.convert.recipe_yaml import flow
from megarl.convert.shell import SFT_MODULE

HF_NAME = re.compile(r"[\w.-]+/[\w.-]+")


@dataclass
class Line:
    value: Any
    comment: str = ""  # why the line differs from verl's: its verl origin and what changed


@dataclass
class Conversion:
    """A recipe's lines (megarl key → Line) and the report on what did not carry over as it was."""

    megatron: bool
    schema: RecipeSchema = RL_RECIPE  # the recipe's kind: `megarl train`'s, or `megarl sft`'s
    verl_config: str = ""  # the verl config the overrides apply to
    lines: dict[str, Line] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)  # "verl.key=value: why" for what does not carry over
    changed: list[str] = field(default_factory=list)  # "verl.key=value → key=value: why"
    defaults: list[str] = field(default_factory=list)  # megarl keys stated with verl's default
    notes: list[str] = field(default_factory=list)  # what to check before a run


def convert(overrides: Sequence[str], config_name: str | None = None, module: str | None = None) -> Conversion:
    """Translate verl's Hydra overrides (`key=value`, `+key=`, `++key=`, `~key`) of `module` run with
    `--config-name config_name` into a megarl recipe's lines: an RL recipe from verl's PPO trainer, an SFT recipe
    from its SFT trainers (`model.partial_pretrain` is theirs alone, so bare overrides with it are read as theirs)."""
    verl, dropped = _parse(overrides)
    if SFT_MODULE.search(module or "") or (module is None and "model.partial_pretrain" in verl):
        return _convert_sft(verl, dropped, config_name, module)
    megatron = ("megatron" in (config_name or "") or (module or "").endswith("_megatron")
                or verl.get("actor_rollout_ref.actor.strategy") == "megatron"
                or any(key.startswith("actor_rollout_ref.actor.megatron.") for key in verl))
    config = config_name or ("ppo_megatron_trainer" if megatron else "ppo_trainer")
    conversion = Conversion(megatron, verl_config=config, dropped=dropped)
    _translate_all(conversion, VerlRun(verl, megatron), verl)
    _state_verl_defaults(conversion, verl_defaults(megatron), _roles(conversion))
    _colocate_critic(conversion)
    _check_model_paths(conversion)
    return conversion


def _convert_sft(verl: dict[str, Any], dropped: list[str], config_name: str | None,
                 module: str | None) -> Conversion:
    """verl's SFT trainers: `fsdp_sft_trainer` (config sft_trainer, one prompt and one response column, the
    example scripts') and `sft_trainer` (config sft_trainer_engine: multi-turn messages through an engine)."""
    engine = bool(SFT_MODULE.search(module or "")) and not (module or "").endswith("fsdp_sft_trainer")
    config = config_name or ("sft_trainer_engine" if engine else "sft_trainer")
    megatron = "megatron" in (verl.get("engine"), verl.get("engine.strategy"))
    conversion = Conversion(megatron, SFT_RECIPE, config, dropped=dropped)
    run = VerlRun(verl, megatron)
    _translate_all(conversion, run, verl)
    if engine:
        conversion.notes.append("verl's sft_trainer reads multi-turn messages (data.messages_key); megarl's SFT "
                                "reads a prompt and a response column: set data.prompt_key and data.response_key")
    else:
        _state_verl_defaults(conversion, VERL_SFT_DEFAULTS, {})
        if "optim.lr_warmup_steps" not in conversion.lines and not any("warmup_steps_ratio" in k for k in verl):
            _state_sft_warmup(conversion, run)
    if "trainer.n_gpus_per_node" not in conversion.lines:
        conversion.notes.append("verl's SFT runs on the processes torchrun starts (--nproc_per_node), whatever "
                                "trainer.n_gpus_per_node says: set trainer.n_gpus_per_node to that count")
    _check_model_paths(conversion)
    return conversion


def _state_sft_warmup(conversion: Conversion, run: VerlRun) -> None:
    """verl's SFT warms up over a tenth of the run's steps by default; megarl counts warmup in steps."""
    try:
        steps = warmup_steps_from_ratio("")(VERL_SFT_WARMUP_RATIO, run)
    except NotCarried as why:
        conversion.notes.append(f"verl's SFT warms the learning rate up by default (optim.lr_warmup_steps_ratio "
                                f"{VERL_SFT_WARMUP_RATIO}); {why}")
        return
    if steps is not OMIT and steps != _value(conversion, "optim.lr_warmup_steps"):
        conversion.lines["optim.lr_warmup_steps"] = Line(steps, f"verl's default, {VERL_SFT_WARMUP_RATIO} × "
                                                                f"trainer.total_training_steps")
        conversion.defaults.append("optim.lr_warmup_steps")


def _translate_all(conversion: Conversion, run: VerlRun, verl: dict[str, Any]) -> None:
    origins: dict[str, str] = {}
    for key, value in verl.items():
        _translate(conversion, run, key, value, origins)


def _parse(overrides: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    verl: dict[str, Any] = {}
    dropped = []
    for override in overrides:
        key, eq, raw = override.partition("=")
        if key.startswith("~"):
            dropped.append(f"{override}: Hydra's delete; a megarl recipe leaves out what it does not set")
            continue
        if not eq or not key.lstrip("+"):
            dropped.append(f"{override}: not a key=value override")
            continue
        try:
            value = parse_value(raw)
        except ConfigError as e:
            dropped.append(f"{override}: {e}")
            continue
        for leaf, value in _leaves(key.lstrip("+"), value):
            verl.pop(leaf, None)  # a later override wins, in its own place
            verl[leaf] = value
    return verl, dropped


def _leaves(key: str, value: Any) -> Iterable[tuple[str, Any]]:
    """`key={a: 1}` is `key.a=1` to Hydra."""
    if isinstance(value, dict) and value:
        for name, child in value.items():
            yield from _leaves(f"{key}.{name}", child)
    else:
        yield key, value


def _translate(conversion: Conversion, run: VerlRun, key: str, value: Any, origins: dict[str, str]) -> None:
    schema = conversion.schema
    port = schema.port_verl_key(key)
    origin = f"{key}={flow(value)}"
    try:
        ours = value if port is None else port.value(value, run)
    except NotCarried as why:
        conversion.dropped.append(f"{origin}: {why}")
        return
    if ours is OMIT:
        return
    target = key if port is None else port.key
    if not schema.accepts(target):
        conversion.dropped.append(f"{origin}: megarl has no {target} (`{schema.command} --help-keys` lists its keys)")
        return
    changed = ours != value
    if ours is None and not _nullable(schema, target):
        conversion.dropped.append(f"{origin}: empty (as an unset variable leaves it); megarl keeps its default")
        return
    if schema.keys.get(target) == "list" and ours is not None and not isinstance(ours, list):
        ours = [ours]
    existing = conversion.lines.get(target)
    if existing is not None:
        if existing.value != ours:
            conversion.dropped.append(f"{origin}: {target} is already {flow(existing.value)} from {origins[target]}")
        return
    note = port.note if port is not None else ""
    comment = ""
    if (renamed(key, target) if schema is RL_RECIPE else key != target) or changed:
        comment = f"verl: {origin}" + (f"; {note}" if note else "")
    if changed:
        conversion.changed.append(f"{origin} → {target}={flow(ours)}" + (f": {note}" if note else ""))
    conversion.lines[target] = Line(ours, comment)
    origins[target] = origin


def _nullable(schema: RecipeSchema, key: str) -> bool:
    """Whether the schema lets `key` be null (a free-form dict's entries may)."""
    if schema.open_parent(key) is not None:
        return True
    parent, _, leaf = key.rpartition(".")
    return OmegaConf.select(schema.defaults, parent)._get_node(leaf)._is_optional()


def _value(conversion: Conversion, key: str) -> Any:
    """The key's value in the converted recipe, or megarl's default."""
    line = conversion.lines.get(key)
    if line is not None:
        return line.value
    default = OmegaConf.select(conversion.schema.defaults, key)
    return OmegaConf.to_container(default) if OmegaConf.is_config(default) else default


def _roles(conversion: Conversion) -> dict[str, bool]:
    """Which optional roles the recipe runs, by megarl's rules (MegaRLConfig.use_critic, use_reference)."""
    uses_reference = _value(conversion, "algorithm.use_kl_in_reward") or _value(conversion, "actor.use_kl_loss")
    return {"critic": _value(conversion, "algorithm.adv_estimator") == "gae",
            "ref": bool(uses_reference) and not _value(conversion, "actor.lora.rank")}  # LoRA: its own reference


def _state_verl_defaults(conversion: Conversion, defaults: dict[str, Any], roles: dict[str, bool]) -> None:
    """verl's `defaults` (megarl key → verl's value) for the keys the overrides left out, in the sections of the
    roles that run."""
    for key, verl_default in defaults.items():
        section = key.split(".")[0]
        if key in conversion.lines or not roles.get(section, True):
            continue
        ours = _value(conversion, key)
        shown = "as the actor's" if str(verl_default).startswith("${") else flow(verl_default)
        conversion.lines[key] = Line(verl_default, f"verl's default, {shown} (megarl's: {flow(ours)})")
        conversion.defaults.append(key)


def _colocate_critic(conversion: Conversion) -> None:
    """megarl's critic beside the actor shares its processes and so its megatron layout; verl's may differ."""
    if not _roles(conversion)["critic"]:
        return
    for name in MESH:
        actor, critic = _value(conversion, f"actor.megatron.{name}"), _value(conversion, f"critic.megatron.{name}")
        if actor != critic:
            key = f"critic.megatron.{name}"
            why = "a critic beside the actor shares its processes, so its layout"
            conversion.lines[key] = Line(actor, f"the actor's (verl's: {critic}): {why}")
            conversion.changed.append(f"{key}={critic} → {actor}: {why}")


def _check_model_paths(conversion: Conversion) -> None:
    for key in ("model.path", "critic.model.path", "reward.model.path"):
        line = conversion.lines.get(key)
        path = line.value if line is not None else None
        if isinstance(path, str) and HF_NAME.fullmatch(path) and not Path(path).expanduser().exists():
            conversion.notes.append(f"{key}={path} is a Hugging Face name: megarl reads a local directory and "
                                    f"downloads nothing; download the model and point {key} at it")
    if not conversion.megatron and _value(conversion, "actor.megatron.tensor_model_parallel_size") == 1:
        conversion.notes.append("verl's FSDP shards the weights over every GPU; megatron at tensor parallel 1 holds "
                                "a whole bf16 copy on each: `megarl plan --recipe R.yaml` says whether it fits, "
                                "and actor.megatron.tensor_model_parallel_size splits it")
