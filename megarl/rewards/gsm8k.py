"""GSM8K rule reward with verl's semantics (ReFT, Trung et al. 2024)."""

from __future__ import annotations

import re

# The final answer sits at the end; searching only the tail keeps the regex cheap on long responses.
SOLUTION_CLIP_CHARS = 300

_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_NUMBER = re.compile(r"(\-?[0-9\.\,]+)")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """strict: the last `#### number` (commas and `$` removed); flexible: the last number-like token."""
    if method not in ("strict", "flexible"):
        raise ValueError(f"method must be 'strict' or 'flexible', got {method!r}")
    solution_str = solution_str[-SOLUTION_CLIP_CHARS:]
    if method == "strict":
        solutions = _STRICT.findall(solution_str)
        return solutions[-1].replace(",", "").replace("$", "") if solutions else None
    for candidate in reversed(_NUMBER.findall(solution_str)):
        if candidate not in ("", "."):
            return candidate
    return None


def compute_score(
    solution_str: str, ground_truth: str, method: str = "strict", format_score: float = 0.0, score: float = 1.0
) -> float:
    """`score` for the right answer, `format_score` for a wrong one, 0 when no answer can be extracted."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    return score if answer == ground_truth else format_score
