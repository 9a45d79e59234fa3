import pytest

from megarl.rewards.math import compute_score, is_equiv, last_boxed_only_string, remove_boxed, strip_string
from megarl.rewards.math_verify import compute_score as math_verify_score


@pytest.mark.parametrize(
    "text, boxed",
    [
        ("so \\boxed{\\frac{a}{b}} done", "\\boxed{\\frac{a}{b}}"),
        ("\\boxed{1} then \\boxed{\\sqrt{\\frac{1}{2}}}", "\\boxed{\\sqrt{\\frac{1}{2}}}"),
        ("$\\boxed 5$", "\\boxed 5"),
        ("\\fbox{7}", "\\fbox{7}"),
        ("\\boxed{unclosed", None),
        ("nothing", None),
    ],
)
def test_last_boxed(text, boxed):
    assert last_boxed_only_string(text) == boxed


def test_remove_boxed():
    assert remove_boxed("\\boxed{\\frac{a}{b}}") == "\\frac{a}{b}"
    assert remove_boxed("\\boxed 5") == "5"
    assert remove_boxed("\\fbox{7}") == "7"


@pytest.mark.parametrize(
    "a, b",
    [
        ("\\frac12", "\\frac{1}{2}"),
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("0.5", "\\frac{1}{2}"),
        ("1/2", "\\frac{1}{2}"),
        ("\\sqrt3", "\\sqrt{3}"),
        ("x = 5", "5"),
        ("90^\\circ", "90"),
        ("50\\%", "50"),
        (".5", "0.5"),
        ("5 \\text{ cm}", "5"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
    ],
)
def test_normalisation_equivalences(a, b):
    assert is_equiv(a, b), (strip_string(a), strip_string(b))


def test_not_equivalent():
    assert not is_equiv("\\frac{1}{3}", "\\frac{1}{2}")
    assert not is_equiv("2", None)
    assert is_equiv(None, None)


def test_compute_score_on_nested_boxed_answers():
    assert compute_score("The answer is $\\boxed{\\frac{3}{4}}$.", "\\frac{3}{4}") == 1.0
    assert compute_score("The answer is $\\boxed{\\dfrac34}$.", "\\frac{3}{4}") == 1.0
    assert compute_score("\\boxed{\\frac{3}{4}} no wait \\boxed{1}", "\\frac{3}{4}") == 0.0
    assert compute_score("I don't know", "1") == 0.0
    assert compute_score("\\boxed{1 \\text{ a } \\text{ b }}", "1") == 0.0  # malformed units: not equal, no crash


def test_math_verify_scorer_is_symbolic():
    assert math_verify_score("so \\boxed{0.5}", "\\frac{1}{2}") == 1.0
    assert math_verify_score("so \\boxed{2}", "\\frac{1}{2}") == 0.0
    assert math_verify_score("gibberish", "3") == 0.0
