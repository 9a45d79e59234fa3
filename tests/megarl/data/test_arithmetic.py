"""The bundled arithmetic task's judge split: each verdict is the rule's (Y where the graded rule rewards the answer),
its prompt the tiny judge recipe's template filled as the judge role fills it."""

import random

from megarl.config import load_config
from megarl.data.arithmetic import JUDGE_PROMPT, VERDICTS, arithmetic_splits, judge_rows
from megarl.rewards.judge import render_prompt
from megarl.rewards.registry import default_compute_score
from tests.helpers import REPO_ROOT


def test_the_judges_verdicts_are_the_rules():
    rows = judge_rows([(3, 4), (0, 0), (19, 19)], random.Random(0))
    assert len(rows) == 3 * 9 and sum(row["extra_info"]["answer"] == "Y" for row in rows) == 3 * 3
    for row in rows:
        question = row["prompt"][0]["content"].split("=")[0] + "="
        answer = row["prompt"][0]["content"][len(question):].split("|")[0]
        a, b = map(int, question[:-1].split("+"))
        rewarded = default_compute_score("synthetic/arithmetic", answer, str(a + b)) == 1.0
        assert row["extra_info"]["answer"] == VERDICTS[0 if rewarded else 1], row
        assert row["prompt"][0]["content"] == render_prompt(JUDGE_PROMPT, question, answer, a + b, None)


def test_the_judge_recipe_reads_the_split_as_it_was_written():
    judge = load_config(str(REPO_ROOT / "recipes/tiny_cpu_judge.yaml")).reward.judge
    assert judge.prompt == JUDGE_PROMPT and (judge.parse.yes, judge.parse.no) == VERDICTS
    splits = arithmetic_splits()
    assert len(splits["judge"]) == 9 * len(splits["train"])
