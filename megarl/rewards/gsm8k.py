"""GSM8K rule reward with verl's semantics (ReFT, Trung et al. 2024)."""

from __future__ import annotations

import re

from megarl.rewards.outcome import AnswerSpan

# The final answer sits at the end; searching only the tail keeps the regex cheap on long responses.
SOLUTION_CLIP_CHARS = 300

_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_NUMBER = re.compile(r"(\-?[0-9\.\,]+)")


def find_answer(solution_str: str, method: str = "strict", **_) -> AnswerSpan | None:
    """Where the answer sits: strict, the last `#### number` (its text without commas and `$`); flexible, the last
    number-like token. Other keyword arguments (`reward.kwargs` for `compute_score`) do not move it."""
    if method not in ("strict", "flexible"):
        raise ValueError(f"method must be 'strict' or 'flexible', got {method!r}")
    offset = max(0, len(solution_str) - SOLUTION_CLIP_CHARS)
    tail = solution_str[offset:]
    if method == "strict":
        matches = list(_STRICT.finditer(tail))
        if not matches:
            return None
        found = matches[-1]
        return AnswerSpan(found.group(1).replace(",", "").replace("$", ""), offset + found.start(1),
                          offset + found.end(1))
    for found in reversed(list(_NUMBER.finditer(tail))):
        if found.group(1) not in ("", "."):
            return AnswerSpan(found.group(1), offset + found.start(1), offset + found.end(1))
    return None


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """strict: the last `#### number` (commas and `$` removed); flexible: the last number-like token."""
    found = find_answer(solution_str, method)
    return found.text if found is not None else None


def compute_score(
    solution_str: str, ground_truth: str, method: str = "strict", format_score: float = 0.0, score: float = 1.0
) -> float:
    """`score` for the right answer, `format_score` for a wrong one, 0 when no answer can be extracted."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    return score if answer == ground_truth else format_score
