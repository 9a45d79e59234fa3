"""verl's overrides → the lines of a megarl recipe: each key through megarl.config.verl_keys (the table the error
hints read), verl's defaults stated where megarl's differ, and what does not carry over, with the reason."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from omegaconf import OmegaConf

from megarl.config.errors import ConfigError
from megarl.config.loader import RL_RECIPE, parse_value
from megarl.config.verl_keys import MESH, OMIT, NotCarried, VerlRun, port_verl_key, renamed, verl_defaults
from megarl.convert.recipe_yaml import flow

HF_NAME = re.compile(r"[\w.-]+/[\w.-]+")


@dataclass
class Line:
    value: Any
    comment: str = ""  # why the line differs from verl's: its verl origin and what changed


@dataclass
class Conversion:
    """A recipe's lines (megarl key → Line) and the report on what did not carry over as it was."""

    megatron: bool
    lines: dict[str, Line] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)  # "verl.key=value: why" for what does not carry over
    changed: list[str] = field(default_factory=list)  # "verl.key=value → key=value: why"
    defaults: list[str] = field(default_factory=list)  # megarl keys stated with verl's default
    notes: list[str] = field(default_factory=list)  # what to check before a run


def convert(overrides: Sequence[str], config_name: str | None = None, module: str | None = None) -> Conversion:
    """Translate verl's Hydra overrides (`key=value`, `+key=`, `++key=`, `~key`) of `module` run with
    `--config-name config_name` into a megarl recipe's lines."""
    verl, dropped = _parse(overrides)
    megatron = ("megatron" in (config_name or "") or (module or "").endswith("_megatron")
                or verl.get("actor_rollout_ref.actor.strategy") == "megatron"
                or any(key.startswith("actor_rollout_ref.actor.megatron.") for key in verl))
    conversion = Conversion(megatron, dropped=dropped)
    run = VerlRun(verl, megatron)
    origins: dict[str, str] = {}
    for key, value in verl.items():
        _translate(conversion, run, key, value, origins)
    _state_verl_defaults(conversion)
    _colocate_critic(conversion)
    _check_model_paths(conversion)
    return conversion


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
    port = port_verl_key(key)
    origin = f"{key}={flow(value)}"
    try:
        ours = value if port is None else port.value(value, run)
    except NotCarried as why:
        conversion.dropped.append(f"{origin}: {why}")
        return
    if ours is OMIT:
        return
    target = key if port is None else port.key
    if not RL_RECIPE.accepts(target):
        conversion.dropped.append(f"{origin}: megarl has no {target} (`megarl train --help-keys` lists its keys)")
        return
    changed = ours != value
    if ours is None and not _nullable(target):
        conversion.dropped.append(f"{origin}: empty (as an unset variable leaves it); megarl keeps its default")
        return
    if RL_RECIPE.keys.get(target) == "list" and ours is not None and not isinstance(ours, list):
        ours = [ours]
    existing = conversion.lines.get(target)
    if existing is not None:
        if existing.value != ours:
            conversion.dropped.append(f"{origin}: {target} is already {flow(existing.value)} from {origins[target]}")
        return
    note = port.note if port is not None else ""
    comment = ""
    if renamed(key, target) or changed:
        comment = f"verl: {origin}" + (f"; {note}" if note else "")
    if changed:
        conversion.changed.append(f"{origin} → {target}={flow(ours)}" + (f": {note}" if note else ""))
    conversion.lines[target] = Line(ours, comment)
    origins[target] = origin


def _nullable(key: str) -> bool:
    """Whether the schema lets `key` be null (a free-form dict's entries may)."""
    if RL_RECIPE.open_parent(key) is not None:
        return True
    parent, _, leaf = key.rpartition(".")
    return OmegaConf.select(RL_RECIPE.defaults, parent)._get_node(leaf)._is_optional()


def _value(conversion: Conversion, key: str) -> Any:
    """The key's value in the converted recipe, or megarl's default."""
    line = conversion.lines.get(key)
    if line is not None:
        return line.value
    default = OmegaConf.select(RL_RECIPE.defaults, key)
    return OmegaConf.to_container(default) if OmegaConf.is_config(default) else default


def _roles(conversion: Conversion) -> dict[str, bool]:
    """Which optional roles the recipe runs, by megarl's rules (MegaRLConfig.use_critic, use_reference)."""
    uses_reference = _value(conversion, "algorithm.use_kl_in_reward") or _value(conversion, "actor.use_kl_loss")
    return {"critic": _value(conversion, "algorithm.adv_estimator") == "gae",
            "ref": bool(uses_reference) and not _value(conversion, "actor.lora.rank")}  # LoRA: its own reference


def _state_verl_defaults(conversion: Conversion) -> None:
    roles = _roles(conversion)
    for key, verl_default in verl_defaults(conversion.megatron).items():
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
