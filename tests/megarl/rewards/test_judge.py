"""The judge's prompt template and its parsers (megarl/rewards/judge.py) on hand-written judge outputs."""

import math

import pytest

from megarl.config.schema import JudgeParseConfig
from megarl.registry import UnknownNameError
from megarl.rewards.judge import JUDGE_PARSERS, JudgeTemplateError, judge_parser, prompt_text, render_prompt


def parse(text, **settings):
    return judge_parser(JudgeParseConfig(**settings)).score(text)


def test_last_number_reads_the_verdict_not_the_reasoning_nor_the_scale():
    assert parse("The answer 12 + 3 = 15 is right. Score: 9") == 9.0
    assert parse("Rating: 7/10") == 7.0
    assert parse("I give it 8.5.") == 8.5
    assert parse("score -2", min=-5, max=5) == -2.0


@pytest.mark.parametrize("text", ["No number here.", "Score: 11", "Score: -1", ""])
def test_last_number_without_a_number_on_the_scale_does_not_parse(text):
    assert parse(text) is None


def test_regex_takes_the_group_of_the_last_match():
    settings = dict(type="regex", pattern=r"Score: (\d+(?:\.\d+)?)", group=1)
    assert parse("Score: 3 at first... on reflection, Score: 4.5", **settings) == 4.5
    assert parse("score 4", **settings) is None
    assert parse("Verdict: [yes] 1", type="regex", pattern=r"\[(\w+)\] (\d)", group=2) == 1.0
    assert parse("Verdict: [yes] 1", type="regex", pattern=r"\[(\w+)\] (\d)", group=1) is None  # not a number
    assert parse("Grade: A", type="regex", pattern=r"Grade: ?(\d*)", group=1) is None  # an empty group


def test_yes_no_is_the_softmax_over_the_two_words():
    yes_no = judge_parser(JudgeParseConfig(type="yes_no", yes="Yes", no="No"))
    assert yes_no.words == ("Yes", "No")
    yes, no = math.log(0.3), math.log(0.1)  # two words' log-probs (the rest of the vocabulary has 0.6)
    assert yes_no.score("", [yes, no]) == pytest.approx(0.75)
    assert yes_no.score("", [-1000.0, 0.0]) == pytest.approx(0.0) and yes_no.score("", [0.0, -1000.0]) == 1.0
    assert yes_no.score("", [-math.inf, -2.0]) == 0.0
    assert yes_no.score("", [-math.inf, -math.inf]) is None


def test_the_registry_names_the_parsers():
    assert JUDGE_PARSERS.names() == ["last_number", "regex", "yes_no"]
    with pytest.raises(UnknownNameError, match="unknown judge parser 'yesno'.*Did you mean 'yes_no'"):
        judge_parser(JudgeParseConfig(type="yesno"))


def test_the_template_is_filled_from_the_row():
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]
    assert prompt_text(chat) == "What is 2 + 2?" and prompt_text("plain") == "plain"
    text = render_prompt("Q: {prompt} A: {response} Truth: {ground_truth} ({level}) {{json}}", chat, "4", 4,
                         {"level": "easy"})
    assert text == "Q: What is 2 + 2? A: 4 Truth: 4 (easy) {json}"
    assert render_prompt("{response}|{ground_truth}", "q", "r", None, None) == "r|"


def test_a_field_the_row_lacks_is_named_with_the_fields_it_has():
    with pytest.raises(JudgeTemplateError, match=r"names \{rubric\}, which this row does not have: the fields are "
                                                 r"prompt, response, ground_truth and the row's extra_info fields "
                                                 r"\(index, split\)"):
        render_prompt("{response} by {rubric}", "q", "r", "t", {"split": "train", "index": 3})
