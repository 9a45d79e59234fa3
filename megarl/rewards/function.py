"""Load a user's reward function from `path/to/file.py:function` or `package.module:function`."""

from __future__ import annotations

from typing import Callable

from megarl.plugins import PluginSpecError, load_named
from megarl.rewards.registry import default_compute_score


class RewardFunctionSpecError(PluginSpecError):
    """`reward.function` does not name a loadable callable."""


def load_reward_function(spec: str | None) -> Callable:
    """The callable `spec` names, or `default_compute_score` when spec is None.

    The function is called as fn(data_source=, solution_str=, ground_truth=, extra_info=, **reward.kwargs)
    and returns a number or a dict with a "score" key (other keys become reward extra info).
    """
    if spec is None:
        return default_compute_score
    fn = load_named(spec, "reward.function", "function", RewardFunctionSpecError)
    if not callable(fn):
        raise RewardFunctionSpecError(f"reward.function={spec!r}: {spec.rpartition(':')[2]!r} is a "
                                      f"{type(fn).__name__}, not a function")
    return fn

