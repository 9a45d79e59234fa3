"""Rule scorers chosen by a sample's `data_source` (verl's default_compute_score)."""

from __future__ import annotations

from typing import Any, Callable

from megarl.registry import Registry
from megarl.rewards import gsm8k, math

RULE_SCORERS: Registry[Callable[..., Any]] = Registry("data_source")
register_data_source = RULE_SCORERS.register

register_data_source("openai/gsm8k", "gsm8k", "synthetic/arithmetic")(gsm8k.compute_score)
register_data_source(
    "HuggingFaceH4/MATH-500",
    "lighteval/MATH",
    "DigitalLearningGmbH/MATH-lighteval",
    "xiaodongguaAIGC/X-R1-750",
    "math",
)(math.compute_score)


def default_compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, **kwargs: Any
) -> float | dict:
    """Score with the rule registered for `data_source`; `kwargs` (recipe `reward.kwargs`) go to it.

    An unknown data_source raises UnknownNameError listing the known ones.
    """
    return RULE_SCORERS.get(data_source)(solution_str, ground_truth, **kwargs)
