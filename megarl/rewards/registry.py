"""Rule scorers chosen by a sample's `data_source` (verl's default_compute_score)."""

from __future__ import annotations

import numbers
from math import isfinite
from typing import Any, Callable, Optional

from megarl.registry import Registry
from megarl.rewards import code, gsm8k, math
from megarl.rewards.outcome import AnswerSpan, GroundTruthError

RULE_SCORERS: Registry[Callable[..., Any]] = Registry("data_source")
register_data_source = RULE_SCORERS.register
# Where each rule scorer finds a response's answer (the sample logs show it): `find_answer(text, **reward.kwargs)`.
ANSWER_FINDERS: Registry[Callable[..., Optional[AnswerSpan]]] = Registry("data_source")

GSM8K_SOURCES = ("openai/gsm8k", "gsm8k", "synthetic/arithmetic", "synthetic/products")
MATH_SOURCES = ("HuggingFaceH4/MATH-500", "lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval",
                "xiaodongguaAIGC/X-R1-750", "math")
for sources, rule in ((GSM8K_SOURCES, gsm8k), (MATH_SOURCES, math)):
    register_data_source(*sources)(rule.compute_score)
    ANSWER_FINDERS.register(*sources)(rule.find_answer)
# A code ground truth holds tests, not an answer: it reaches the scorer as it is (megarl/rewards/code.py).
register_data_source(*code.CODE_SOURCES)(code.compute_score)
ANSWER_FINDERS.register(*code.CODE_SOURCES)(code.find_program)


def default_compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None, **kwargs: Any
) -> float | dict:
    """Score with the rule registered for `data_source`; `kwargs` (recipe `reward.kwargs`) go to it.

    An unknown data_source raises UnknownNameError listing the known ones; a ground truth the rules cannot compare
    raises GroundTruthError.
    """
    scorer = RULE_SCORERS.get(data_source)
    if data_source not in code.CODE_SOURCES:
        ground_truth = rule_ground_truth(data_source, ground_truth)
    return scorer(solution_str, ground_truth, **kwargs)


def rule_ground_truth(data_source: str, ground_truth: Any) -> str:
    """`ground_truth` as the answer string the rule scorers compare: strings as they are, whole numbers without a
    fractional part (an int column read back as floats must still match "#### 72"), other finite numbers as
    written. Anything else would score 0 on every response, so it raises GroundTruthError instead."""
    if isinstance(ground_truth, str) and ground_truth.strip():
        return ground_truth
    if isinstance(ground_truth, numbers.Real) and not isinstance(ground_truth, bool) and isfinite(ground_truth):
        return str(int(ground_truth)) if float(ground_truth).is_integer() else str(ground_truth)
    raise GroundTruthError(
        f"data_source {data_source!r}: ground truth {ground_truth!r} ({type(ground_truth).__name__}) is not an "
        "answer the rule scorer can compare: set reward_model.ground_truth to the answer as a non-empty string "
        "(e.g. '72'), as `megarl preprocess` writes it"
    )
