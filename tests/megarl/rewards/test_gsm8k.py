import pytest

from megarl.rewards.gsm8k import compute_score, extract_solution


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so the answer is\n#### 72", "72"),
        ("#### 1,234", "1234"),  # thousands separators removed
        ("#### -5", "-5"),  # negatives kept
        ("first #### 3 then corrected #### 4", "4"),  # the last one wins
        ("#### 3.5", "3.5"),
        ("the answer is 72", None),  # strict needs the marker
        ("####72", None),  # and the space after it
    ],
)
def test_strict_extraction(text, expected):
    assert extract_solution(text, "strict") == expected


def test_flexible_takes_last_number_like_token():
    assert extract_solution("I think 12 apples, so 15.", "flexible") == "15."
    assert extract_solution("costs $1,000 total", "flexible") == "1,000"
    assert extract_solution("no digits here .", "flexible") is None


def test_only_the_last_300_characters_are_searched():
    answer = "#### 42" + " filler" * 60
    assert len(answer) > 300
    assert compute_score(answer, "42") == 0.0
    assert compute_score("x" * 5000 + "#### 42", "42") == 1.0


def test_scores():
    assert compute_score("#### 72", "72") == 1.0
    assert compute_score("#### 71", "72") == 0.0
    assert compute_score("#### 71", "72", format_score=0.1) == 0.1
    assert compute_score("no answer", "72", format_score=0.1) == 0.0
    assert compute_score("#### 7", "72", score=2.0, format_score=0.5) == 0.5
    assert compute_score("value 72", "72", method="flexible") == 1.0
    with pytest.raises(ValueError, match="method"):
        compute_score("#### 1", "1", method="lenient")
