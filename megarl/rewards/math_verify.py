r"""MATH reward through HuggingFace's `math-verify` (symbolic equivalence: 0.5 = \frac{1}{2} = 1/2, sets,
intervals, ...). Use it with `reward.function=megarl.rewards.math_verify:compute_score`."""

from __future__ import annotations


def compute_score(solution_str: str, ground_truth: str, timeout_score: float = 0.0) -> float:
    try:
        from math_verify.errors import TimeoutException
        from math_verify.metric import math_metric
        from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig
    except ImportError as e:
        raise ImportError("the math-verify scorer needs `pip install math-verify` (or megarl[math-verify])") from e

    verify = math_metric(
        gold_extraction_target=(LatexExtractionConfig(),),
        pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()),
    )
    try:
        score, _ = verify(["\\boxed{" + ground_truth + "}"], [solution_str])
    except TimeoutException:
        return timeout_score
    except Exception:
        # math-verify raises when it cannot parse a prediction: that is a wrong answer, not a crash.
        return 0.0
    return float(score)
