"""Load a recipe: YAML file, then dotted `key.sub=value` overrides, onto a schema; validate; write it out.

A `RecipeSchema` names the schema of one command: RL recipes (`RL_RECIPE`, `megarl train`, the default), SFT
recipes (`megarl.config.sft_validate.SFT_RECIPE`, `megarl sft`) or reward-model recipes
(`megarl.config.rm_validate.RM_RECIPE`, `megarl rm`). Every problem becomes a ConfigError naming the
key and what to do, with close-match suggestions for typos and the megarl spelling of verl keys.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from megarl.config.errors import ConfigError
from megarl.config.schema import MegaRLConfig
from megarl.config.verl_keys import Port, port_verl_key

RESOLVED_CONFIG_NAME = "config.yaml"


def _schema_keys(node: DictConfig, prefix: str = "") -> dict[str, str]:
    """Every dotted key of the schema → 'section', 'list', 'open' (a free-form dict) or 'value'."""
    keys: dict[str, str] = {}
    for name in node.keys():
        key = f"{prefix}{name}"
        child = node._get_node(name)
        if isinstance(child, DictConfig):
            if OmegaConf.get_type(child) is dict:
                keys[key] = "open"
            else:
                keys[key] = "section"
                keys.update(_schema_keys(child, key + "."))
        else:
            keys[key] = "list" if isinstance(child, ListConfig) else "value"
    return keys


class RecipeSchema:
    """What one recipe command loads: its root dataclass (every default), the checks run on a loaded config,
    where a verl key goes (megarl.config.verl_keys; None for a key verl spells as megarl does) and the command,
    named in messages."""

    def __init__(self, root: type, validate: Callable[[Any], None], port_verl_key: Callable[[str], Port | None],
                 command: str):
        self.root, self.validate, self.port_verl_key, self.command = root, validate, port_verl_key, command
        self.defaults = OmegaConf.structured(root)
        self.keys = _schema_keys(self.defaults)

    def open_parent(self, key: str) -> str | None:
        """The free-form dict (e.g. rollout.engine_kwargs) that `key` is an entry of, if any."""
        return next((p for p in _prefixes(key) if self.keys.get(p) == "open"), None)

    def accepts(self, key: str) -> bool:
        """Whether `key` can be set: a value, list or free-form dict of the schema, or an entry of such a dict."""
        return self.keys.get(key, "section") != "section" or self.open_parent(key) is not None


def _validate_rl(config: MegaRLConfig) -> None:
    from megarl.config.validate import validate_config  # it reads the registries of packages that read the config

    validate_config(config)


RL_RECIPE = RecipeSchema(MegaRLConfig, _validate_rl, port_verl_key, "megarl train")


def _suggest(key: str, schema: RecipeSchema) -> str:
    port = schema.port_verl_key(key)
    if port is not None and port.key is None:
        return f" That is verl's name; megarl has no counterpart: {port.note}."
    if port is not None and schema.accepts(port.key):
        return f" That is verl's name; in megarl it is {port.key}" + (f" ({port.note})." if port.note else ".")
    if port is not None:  # a verl key whose megarl spelling megarl does not have
        return f" That is verl's name; megarl has no {port.key}.{_close_matches(port.key, schema)}"
    return _close_matches(key, schema)


def _close_matches(key: str, schema: RecipeSchema) -> str:
    leaves = [k for k, kind in schema.keys.items() if kind != "section"]
    close = difflib.get_close_matches(key, leaves, n=3, cutoff=0.75)
    if not close:  # the right name in the wrong section, e.g. data.ppo_mini_batch_size
        leaf = key.rsplit(".", 1)[-1]
        close = [k for k in leaves if k.rsplit(".", 1)[-1] == leaf][:3]
    return f" Did you mean {' or '.join(close)}?" if close else f" See `{schema.command} --help-keys` for every key."


def _flatten(value: Any, keys: dict[str, str], prefix: str = "") -> Iterable[tuple[str, Any]]:
    """Dotted (key, value) leaves of a nested recipe; a free-form dict key is one leaf, an empty section none."""
    key = prefix.rstrip(".")
    if isinstance(value, dict) and keys.get(key) != "open":
        for name, child in value.items():
            yield from _flatten(child, keys, f"{prefix}{name}.")
    else:
        yield key, value


def _check_keys(tree: dict, origin: str, schema: RecipeSchema) -> dict:
    """Reject unknown keys (all of them at once); wrap a scalar given for a list key into a list."""
    problems, checked = [], {}
    for key, value in _flatten(tree, schema.keys):
        kind = schema.keys.get(key)
        if kind is None and schema.open_parent(key) is None:
            problems.append(f"{origin}: unknown key {key!r}.{_suggest(key, schema)}")
            continue
        if kind == "section":
            problems.append(f"{origin}: {key!r} is a section; set its keys, e.g. {key}.<name>=value")
            continue
        if kind == "list" and value is not None and not isinstance(value, (list, tuple)):
            value = [value]
        checked[key] = value
    if problems:
        raise ConfigError(problems)
    return checked


def _prefixes(key: str) -> list[str]:
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def parse_value(raw: str) -> Any:
    """An override's value as Hydra and OmegaConf read it: numbers, booleans, null, [lists], quoted strings."""
    try:
        return OmegaConf.to_container(OmegaConf.from_dotlist([f"v={raw}"]))["v"]
    except (yaml.YAMLError, OmegaConfBaseException) as e:
        problem = str(e).splitlines()[0]
        raise ConfigError(f"the value {raw!r} is not one YAML value ({problem}): quote it") from None


def _parse_overrides(overrides: Sequence[str]) -> tuple[dict, list[str]]:
    """{key: value} of `key.sub=value` overrides, and those written with Hydra's `+`/`++` (read as the key)."""
    tree: dict = {}
    hydra_plus = []
    for override in overrides:
        key, sep, raw = override.partition("=")
        key = key.strip()
        bare = key[2:] if key.startswith("++") else key[1:] if key.startswith("+") else key
        if not sep or not bare or bare.startswith(("+", "~")) or key.startswith("~"):
            raise ConfigError(f"override {override!r}: write it as key.sub=value (e.g. rollout.n=8)")
        if bare != key:
            hydra_plus.append(key)
        try:
            tree[bare] = parse_value(raw)
        except ConfigError as e:
            raise ConfigError(f"override {override!r}: {e}") from None
    return tree, hydra_plus


def _nest(flat: dict) -> dict:
    nested: dict = {}
    for key, value in flat.items():
        node = nested
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def _read_recipe(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        known = sorted(p.name for p in path.parent.glob("*.yaml")) if path.parent.is_dir() else []
        hint = f" Recipes in {path.parent}: {', '.join(known)}." if known else ""
        raise ConfigError(f"recipe {path} does not exist.{hint}")
    try:
        tree = OmegaConf.to_container(OmegaConf.load(path))
    except Exception as e:
        raise ConfigError(f"recipe {path} is not valid YAML: {e}") from e
    if tree is None:
        return {}
    if not isinstance(tree, dict):
        raise ConfigError(f"recipe {path} must be a mapping of sections (data:, actor:, ...), not a list")
    return tree


def load_config(recipe: str | Path | None = None, overrides: Sequence[str] = (),
                schema: RecipeSchema = RL_RECIPE, notes: list[str] | None = None) -> Any:
    """Schema defaults ← recipe YAML ← overrides, type-checked, interpolations resolved, then validated; an
    instance of `schema.root` (MegaRLConfig for RL recipes). `notes` receives what a person should know of how the
    overrides were read (Hydra's `+key=` read as `key=`)."""
    layers = []
    if recipe is not None:
        layers.append(_check_keys(_read_recipe(recipe), f"recipe {recipe}", schema))
    if overrides:
        tree, hydra_plus = _parse_overrides(overrides)
        layers.append(_check_keys(tree, "override", schema))
        if hydra_plus and notes is not None:
            notes.append(f"note: read {', '.join(hydra_plus)} as megarl's "
                         f"{', '.join(k.lstrip('+') for k in hydra_plus)} (megarl needs no Hydra +/++)")
    try:
        merged = OmegaConf.merge(schema.defaults, *(_nest(layer) for layer in layers))
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "?"
        message = str(e).split("\n")[0]
        raise ConfigError(f"{key}: {message}") from None
    schema.validate(config)
    return config


def to_yaml(config: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))


def save_config(config: Any, directory: str | Path) -> Path:
    """Write the resolved config as `config.yaml` in `directory` (through a temporary file, replaced atomically); it
    loads back as a recipe. The process that owns the run's directory writes it (megarl/recipe_command.py)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / RESOLVED_CONFIG_NAME
    tmp = path.with_name(f".{RESOLVED_CONFIG_NAME}.{os.getpid()}.tmp")
    tmp.write_text(to_yaml(config))
    tmp.replace(path)
    return path


def describe_keys(schema: RecipeSchema = RL_RECIPE) -> str:
    """Every key with its default (interpolations shown as written), one per line, for `--help-keys`."""
    lines = []
    for key, kind in schema.keys.items():
        if kind == "section":
            continue
        parent, _, leaf = key.rpartition(".")
        node = (OmegaConf.select(schema.defaults, parent) if parent else schema.defaults)._get_node(leaf)
        value = OmegaConf.to_container(node, resolve=False) if isinstance(node, (DictConfig, ListConfig)) else node._value()
        lines.append(f"{key} = {value}")
    return "\n".join(lines)
