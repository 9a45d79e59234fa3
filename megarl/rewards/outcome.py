"""One sample's call of a reward function and what came of it, the same in the driver and in a pool worker."""

from __future__ import annotations

import math
import numbers
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional

import torch

from megarl.registry import UnknownNameError

FLOAT32_MAX = torch.finfo(torch.float32).max


class AnswerSpan(NamedTuple):
    """The answer a scorer read off a response, and where: `response[start:end]` (text may be normalised)."""

    text: str
    start: int
    end: int


class GroundTruthError(ValueError):
    """A sample's ground truth is missing or of a type its scorer cannot use (an answer to compare, code tests)."""


class RewardFunctionError(RuntimeError):
    """The reward function failed on every sample of a batch (it raised, ran past reward.timeout_s, or found no
    usable ground truth), or no worker can run it: a bug to fix, not a flaky sample."""


@dataclass
class Outcome:
    """A score (and the extra keys of a dict-returning function), or why the sample scores 0."""

    score: float = 0.0
    extra: dict = field(default_factory=dict)
    error: Optional[str] = None  # what went wrong (the exception's message), when the function failed on the sample
    error_type: str = ""  # the exception's class name, e.g. GroundTruthError
    details: str = ""  # the traceback, for the log
    timed_out: bool = False  # ran past reward.timeout_s
    output_overflow: int = 0  # bytes the call printed past the console's share (megarl/rewards/pool.py)


def call_reward(fn: Callable, sample: dict, kwargs: dict) -> Outcome:
    """fn(**sample, **kwargs) as an Outcome. UnknownNameError (an unknown data_source: the data, not the sample, is
    wrong) is raised; any other failure, or a result that is not a finite number within float32's range, is the
    outcome's error."""
    try:
        score, extra = as_score(fn(**sample, **kwargs))
    except UnknownNameError:
        raise
    except Exception as exc:
        return failure(exc, traceback.format_exc())
    return Outcome(score, extra)


def failure(exc: BaseException, details: str = "") -> Outcome:
    return Outcome(error=str(exc), error_type=type(exc).__name__, details=details)


def as_score(result: Any) -> tuple[float, dict]:
    extra: dict = {}
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"a reward function returning a dict must include 'score'; got keys {sorted(result)}")
        extra = {k: v for k, v in result.items() if k != "score"}
        result = result["score"]
    if isinstance(result, torch.Tensor) and result.numel() == 1:
        result = result.item()
    if not isinstance(result, numbers.Real) or not math.isfinite(float(result)):
        raise ValueError(f"a reward must be a finite number, got {result!r}")
    if abs(float(result)) > FLOAT32_MAX:  # it would become inf in the batch's float32 scores
        raise ValueError(f"a reward must be within float32's range (|score| ≤ {FLOAT32_MAX:.3g}), got {result!r}")
    return float(result), extra
