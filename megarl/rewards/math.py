r"""MATH rule reward: the last `\boxed{}` answer, compared after the Hendrycks et al. string normalisation
(as in lm-evaluation-harness's hendrycks_math and verl's math reward)."""

from __future__ import annotations

from megarl.rewards.outcome import AnswerSpan


def compute_score(solution_str: str, ground_truth: str) -> float:
    found = find_answer(solution_str)
    return 1.0 if found is not None and is_equiv(found.text, ground_truth) else 0.0


def find_answer(solution_str: str, **_) -> AnswerSpan | None:
    r"""The content of the last `\boxed{}` (or `\boxed x`, `\fbox{}`), and where it sits in the response."""
    boxed = last_boxed_only_string(solution_str)
    answer = remove_boxed(boxed) if boxed is not None else None
    if answer is None:
        return None
    start = solution_str.rfind(boxed) + len(boxed) - len(answer) - (0 if boxed.startswith("\\boxed ") else 1)
    return AnswerSpan(answer, start, start + len(answer))


def last_boxed_only_string(string: str) -> str | None:
    r"""The last `\boxed{...}` (braces balanced, so nested `\frac{a}{b}` stays whole), `\boxed x`, or `\fbox{...}`."""
    idx = string.rfind("\\boxed")
    if "\\boxed " in string:
        return "\\boxed " + string.split("\\boxed ")[-1].split("$")[0]
    if idx < 0:
        idx = string.rfind("\\fbox")
        if idx < 0:
            return None
    depth = 0
    for i in range(idx, len(string)):
        if string[i] == "{":
            depth += 1
        elif string[i] == "}":
            depth -= 1
            if depth == 0:
                return string[idx : i + 1]
    return None


def remove_boxed(s: str) -> str | None:
    for left in ("\\boxed ", "\\boxed{", "\\fbox{"):
        if s.startswith(left):
            return s[len(left) :] if left.endswith(" ") else (s[len(left) : -1] if s.endswith("}") else None)
    return None


def is_equiv(str1: str | None, str2: str | None) -> bool:
    if str1 is None or str2 is None:
        return str1 is None and str2 is None
    try:
        return strip_string(str1) == strip_string(str2)
    except Exception:
        return str1 == str2


def _fix_fracs(string: str) -> str:
    r"""\frac12 → \frac{1}{2}, \frac1b → \frac{1}{b}, \frac1{72} → \frac{1}{72}."""
    substrs = string.split("\\frac")
    new_str = substrs[0]
    for substr in substrs[1:]:
        new_str += "\\frac"
        if substr and substr[0] == "{":
            new_str += substr
            continue
        if len(substr) < 2:
            return string
        a, b, rest = substr[0], substr[1], substr[2:]
        new_str += "{" + a + "}" + (b if b == "{" else "{" + b + "}") + rest
    return new_str


def _fix_a_slash_b(string: str) -> str:
    parts = string.split("/")
    if len(parts) != 2:
        return string
    try:
        a, b = int(parts[0]), int(parts[1])
    except ValueError:
        return string
    return f"\\frac{{{a}}}{{{b}}}" if string == f"{a}/{b}" else string


def _remove_right_units(string: str) -> str:
    # "\text{ " only ever introduces units in MATH answers.
    if "\\text{ " in string:
        splits = string.split("\\text{ ")
        if len(splits) != 2:
            raise ValueError("more than one unit")
        return splits[0]
    return string


def _fix_sqrt(string: str) -> str:
    if "\\sqrt" not in string:
        return string
    splits = string.split("\\sqrt")
    new_string = splits[0]
    for split in splits[1:]:
        if split and split[0] != "{":
            new_string += "\\sqrt{" + split[0] + "}" + split[1:]
        else:
            new_string += "\\sqrt" + split
    return new_string


def strip_string(string: str) -> str:
    string = string.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    string = string.replace("tfrac", "frac").replace("dfrac", "frac")
    string = string.replace("\\left", "").replace("\\right", "")
    string = string.replace("^{\\circ}", "").replace("^\\circ", "")
    string = string.replace("\\$", "")
    string = _remove_right_units(string)
    string = string.replace("\\%", "").replace("%", "")
    # " .5" → " 0.5" and "{.5" → "{0.5"; a leading "." gets its 0 below.
    string = string.replace(" .", " 0.").replace("{.", "{0.")
    if not string:
        return string
    if string[0] == ".":
        string = "0" + string
    # "k = 3" → "3" when the left side is a short variable name.
    if len(string.split("=")) == 2 and len(string.split("=")[0]) <= 2:
        string = string.split("=")[1]
    string = _fix_sqrt(string)
    string = string.replace(" ", "")
    string = _fix_fracs(string)
    if string == "0.5":
        string = "\\frac{1}{2}"
    return _fix_a_slash_b(string)
