"""An LLM judge's prompt and the reading of its answer (`reward.judge`, docs/judge.md): the template rendered for one
response, and a registry of parsers (`reward.judge.parse.type`) that turn what the judge wrote, or the log-probs
of its first token, into a score. A judge output that does not parse is None here; the judge role scores it
`reward.judge.unparsed_score` and counts it.
"""

from __future__ import annotations

import math
import re
import string
from typing import TYPE_CHECKING, Any, Optional, Protocol, Sequence

from megarl.registry import Registry

if TYPE_CHECKING:  # the config's validator imports this registry
    from megarl.config.schema import JudgeParseConfig

TEMPLATE_FIELDS = ("prompt", "response", "ground_truth")  # besides the row's extra_info fields
# A number; one right after "/" is a scale's end ("7/10"), not a score.
NUMBER = re.compile(r"(?<![\d/.])[-+]?\d+(?:\.\d+)?")


class JudgeTemplateError(ValueError):
    """`reward.judge.prompt` names a field a row does not have, or is not a format string."""


def template_fields(template: str) -> list[str]:
    """The fields `template` fills ({name}), in order; ValueError for a malformed one (an unclosed brace, a
    positional {} or an attribute or index, which rows do not have)."""
    fields = []
    for _, name, _, _ in string.Formatter().parse(template):
        if name is None:
            continue
        if not name.isidentifier():
            raise ValueError(f"{{{name}}} is not a field name: use {{prompt}}, {{response}}, {{ground_truth}} or an "
                             "extra_info field's name (write {{ and }} for literal braces)")
        fields.append(name)
    return fields


def prompt_text(raw_prompt: Any) -> str:
    """The question a row asks: its text, or a chat prompt's last user message."""
    if isinstance(raw_prompt, str):
        return raw_prompt
    users = [message["content"] for message in raw_prompt if message.get("role") == "user"]
    return str(users[-1]) if users else "\n".join(str(message["content"]) for message in raw_prompt)


def render_prompt(template: str, raw_prompt: Any, response: str, ground_truth: Any,
                  extra_info: Optional[dict]) -> str:
    """`template` filled for one response: the fixed fields, then the row's extra_info fields by name."""
    values = {**(extra_info or {}), "prompt": prompt_text(raw_prompt), "response": response,
              "ground_truth": "" if ground_truth is None else str(ground_truth)}
    missing = [name for name in template_fields(template) if name not in values]
    if missing:
        raise JudgeTemplateError(
            f"reward.judge.prompt names {', '.join('{' + m + '}' for m in missing)}, which this row does not have: "
            f"the fields are {', '.join(TEMPLATE_FIELDS)} and the row's extra_info fields "
            f"({', '.join(sorted(extra_info or {})) or 'none'})")
    return template.format_map(values)


class JudgeParser(Protocol):
    # The words whose next-token log-probs the judge reads instead of generating (yes_no); () to generate text.
    words: tuple[str, ...]

    def score(self, text: str, word_logprobs: Sequence[float] = ()) -> Optional[float]:
        """The score of what the judge wrote (`text`), or of its `words`' log-probs; None: it does not parse."""


JUDGE_PARSERS: Registry[type] = Registry("judge parser")


@JUDGE_PARSERS.register("last_number")
class LastNumber:
    """The last number the judge wrote, on the scale [min, max]; one off the scale did not follow the prompt."""

    words = ()

    def __init__(self, parse: JudgeParseConfig):
        self.low, self.high = parse.min, parse.max

    def score(self, text: str, word_logprobs: Sequence[float] = ()) -> Optional[float]:
        numbers = NUMBER.findall(text)
        if not numbers:
            return None
        value = float(numbers[-1])
        return value if self.low <= value <= self.high else None


@JUDGE_PARSERS.register("regex")
class RegexGroup:
    """A group of the pattern's last match, read as a number (judges reason first and conclude last)."""

    words = ()

    def __init__(self, parse: JudgeParseConfig):
        if parse.pattern is None:
            raise ValueError("reward.judge.parse.type=regex needs reward.judge.parse.pattern")
        self.pattern, self.group = re.compile(parse.pattern), parse.group

    def score(self, text: str, word_logprobs: Sequence[float] = ()) -> Optional[float]:
        matches = list(self.pattern.finditer(text))
        found = matches[-1].group(self.group) if matches else None
        if found is None:
            return None
        try:
            value = float(found.strip())
        except ValueError:
            return None
        return value if math.isfinite(value) else None


@JUDGE_PARSERS.register("yes_no")
class YesNo:
    """The probability of `yes` against `no` as the judge's first token: the softmax over the two words' logits
    (their log-probs differ from the logits by the same constant), not a sampled word."""

    def __init__(self, parse: JudgeParseConfig):
        self.words = (parse.yes, parse.no)

    def score(self, text: str, word_logprobs: Sequence[float] = ()) -> Optional[float]:
        yes, no = word_logprobs
        if math.isinf(yes) and math.isinf(no):  # neither word possible: no probability to read
            return None
        return 0.5 * (1.0 + math.tanh((yes - no) / 2))  # the two-way softmax, without exp's overflow


def judge_parser(parse: JudgeParseConfig) -> JudgeParser:
    return JUDGE_PARSERS.get(parse.type)(parse)
