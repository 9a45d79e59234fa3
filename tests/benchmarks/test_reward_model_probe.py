"""benchmarks/reward_model_probe.py on a tiny reward model: its figures are the ones computed here by hand."""

import sys

import pytest

from tests.helpers import REPO_ROOT, make_reward_model

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from reward_model_probe import Judge, pair_accuracy, right_answer_on_top  # noqa: E402

PROMPT = [{"role": "user", "content": "What is 1 + 2?"}]


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    return Judge(str(make_reward_model(tmp_path_factory.mktemp("rm") / "rm")))


def test_pairs_are_counted_by_grade(judge):
    ranking = {"prompt": PROMPT, "responses": ["#### 3", "#### 4", "= 3", "nothing"],
               "reward_model": {"ground_truth": "3"}}
    scores = [judge(PROMPT, text) for text in ranking["responses"]]
    expected = {f"{3 - i}-{3 - j}": float(scores[i] > scores[j]) for i in range(4) for j in range(i + 1, 4)}
    assert pair_accuracy(judge, [ranking]) == expected


def test_the_right_answer_is_on_top_when_it_scores_highest(judge):
    scores = [judge(PROMPT, f"#### {answer}") for answer in range(6)]
    favourite = max(range(6), key=scores.__getitem__)
    truths = (favourite, (favourite + 1) % 6)
    rows = [{"prompt": PROMPT, "reward_model": {"ground_truth": str(truth)}} for truth in truths]
    assert right_answer_on_top(judge, rows, max_answer=5) == 0.5
