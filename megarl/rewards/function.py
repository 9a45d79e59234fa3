"""Load a user's reward function from `path/to/file.py:function` or `package.module:function`."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Callable

from megarl.rewards.registry import default_compute_score


class RewardFunctionSpecError(ValueError):
    """`reward.function` does not name a loadable callable."""


def load_reward_function(spec: str | None) -> Callable:
    """The callable `spec` names, or `default_compute_score` when spec is None.

    The function is called as fn(data_source=, solution_str=, ground_truth=, extra_info=, **reward.kwargs)
    and returns a number or a dict with a "score" key (other keys become reward extra info).
    """
    if spec is None:
        return default_compute_score
    where, name, is_file = check_reward_function_spec(spec)
    module = _load_file(where, spec) if is_file else _import(where, spec)
    fn = getattr(module, name, None)
    if fn is None:
        defined = sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_"))
        raise RewardFunctionSpecError(
            f"reward.function={spec!r}: {where} has no function {name!r}; it defines: {', '.join(defined) or 'none'}"
        )
    if not callable(fn):
        raise RewardFunctionSpecError(f"reward.function={spec!r}: {name!r} is a {type(fn).__name__}, not a function")
    return fn


def check_reward_function_spec(spec: str) -> tuple[str, str, bool]:
    """Split `spec` into (file or module, function name, is a file), checking its form and that a named
    file exists, without running any of the user's code."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise RewardFunctionSpecError(
            f"reward.function={spec!r}: write it as 'path/to/file.py:function' or 'package.module:function'"
        )
    is_file = where.endswith(".py") or "/" in where
    if is_file and not Path(where).expanduser().is_file():
        raise RewardFunctionSpecError(f"reward.function={spec!r}: file {where} does not exist")
    return where, name, is_file


def _load_file(path: str, spec: str):
    file = Path(path).expanduser()
    module_name = f"megarl_user_reward_{abs(hash(str(file.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(module_name, file)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # so pickling (Ray, process pools) can find the function again
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[module_name]
        raise RewardFunctionSpecError(f"reward.function={spec!r}: importing {file} failed: {e!r}") from e
    return module


def _import(module_name: str, spec: str):
    try:
        return importlib.import_module(module_name)
    except ImportError as e:
        raise RewardFunctionSpecError(f"reward.function={spec!r}: cannot import {module_name}: {e}") from e
