"""User code a recipe names as `path/to/file.py:name` or `package.module:name` (a reward function, a rollout
backend): the form checked without running anything, then the module loaded and the name looked up, each failure a
`PluginSpecError` that names the recipe key and what to fix."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path


class PluginSpecError(ValueError):
    """A recipe key does not name loadable user code."""


def check_spec(spec: str, key: str, error: type[PluginSpecError] = PluginSpecError) -> tuple[str, str, bool]:
    """Split `spec` into (file or module, name, is a file), checking its form and that a named file exists."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise error(f"{key}={spec!r}: write it as 'path/to/file.py:name' or 'package.module:name'")
    is_file = where.endswith(".py") or "/" in where
    if is_file and not Path(where).expanduser().is_file():
        raise error(f"{key}={spec!r}: file {where} does not exist")
    return where, name, is_file


def load_named(spec: str, key: str, kind: str, error: type[PluginSpecError] = PluginSpecError) -> object:
    """What `spec` names; `kind` ("function", "class") says what the module's listing shows when it is missing."""
    where, name, is_file = check_spec(spec, key, error)
    module = _load_file(where, spec, key, error) if is_file else _import(where, spec, key, error)
    found = getattr(module, name, None)
    if found is None:
        wanted = inspect.isfunction if kind == "function" else inspect.isclass
        defined = sorted(n for n, v in vars(module).items() if wanted(v) and not n.startswith("_"))
        raise error(f"{key}={spec!r}: {where} has no {kind} {name!r}; it defines: {', '.join(defined) or 'none'}")
    return found


def registered_or_user_class(name: str, registry, key: str, base: type, shown_as: str) -> type:
    """The class a recipe names at `key`: `registry`'s entry, or user code as 'path/to/file.py:Class' or
    'package.module:Class', which must subclass `base` (`shown_as`: its public name, for the error)."""
    if ":" not in name:
        return registry.get(name)
    cls = load_named(name, key, "class")
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise PluginSpecError(f"{key}: {name!r} is not a subclass of {shown_as}")
    return cls


def _load_file(path: str, spec: str, key: str, error: type[PluginSpecError]):
    file = Path(path).expanduser()
    module_name = f"megarl_user_{abs(hash(str(file.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # so pickling (Ray, process pools) can find what it defines again
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[module_name]
        raise error(f"{key}={spec!r}: importing {file} failed: {e!r}") from e
    return module


def _import(module_name: str, spec: str, key: str, error: type[PluginSpecError]):
    try:
        return importlib.import_module(module_name)
    except ImportError as e:
        raise error(f"{key}={spec!r}: cannot import {module_name}: {e}") from e


def spec_problems(spec: str, key: str) -> list[str]:
    """`check_spec`'s complaint as a config validation problem, or none."""
    try:
        check_spec(spec, key)
    except PluginSpecError as e:
        return [str(e)]
    return []
