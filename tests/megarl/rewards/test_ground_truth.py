"""The rule scorers compare answer strings: a numeric ground truth is converted, a missing one is an error that
names the data_source and the fix, never a quiet 0 for a whole batch."""

import numpy as np
import pytest

from megarl.config import ConfigError, load_config
from megarl.rewards import RewardFunctionError, RewardScorer, default_compute_score
from megarl.rewards.registry import GroundTruthError, rule_ground_truth
from tests.megarl.rewards.test_dispatch import encode_responses


@pytest.mark.parametrize(
    "value, expected",
    [("72", "72"), (" 72", " 72"), (72, "72"), (np.int64(-3), "-3"), (48.0, "48"), (np.float64(0.5), "0.5")],
)
def test_numbers_become_the_strings_the_rules_compare(value, expected):
    assert rule_ground_truth("openai/gsm8k", value) == expected


@pytest.mark.parametrize("value", [None, "", "  ", True, float("nan"), ["72"], {"answer": "72"}])
def test_missing_or_unusable_ground_truth_names_the_source_and_the_fix(value):
    with pytest.raises(GroundTruthError, match=r"data_source 'openai/gsm8k'.*reward_model.ground_truth"):
        rule_ground_truth("openai/gsm8k", value)


def test_int_ground_truths_score_and_missing_ones_count_as_errors(tokenizer, caplog):
    texts = ["#### 72", "\\boxed{48}", "#### 5", "#### 5"]
    responses, mask = encode_responses(tokenizer, texts)
    sources = ["openai/gsm8k", "HuggingFaceH4/MATH-500", "openai/gsm8k", "openai/gsm8k"]
    result = RewardScorer(tokenizer, default_compute_score)(responses, mask, sources, [72, 48.0, None, ""])
    assert result.scores.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert result.num_errors == 2 and "ground truth None" in caplog.text


def test_a_batch_without_a_usable_ground_truth_is_an_error(tokenizer):
    responses, mask = encode_responses(tokenizer, ["#### 72", "#### 48"])
    with pytest.raises(RewardFunctionError, match=r"no sample of the batch has a usable ground truth") as info:
        RewardScorer(tokenizer, default_compute_score)(responses, mask, ["openai/gsm8k"] * 2, [None, ""])
    assert "data_source 'openai/gsm8k'" in str(info.value) and "reward_model.ground_truth" in str(info.value)


def test_reward_timeout_and_workers_must_be_positive():
    assert load_config().reward.timeout_s > 0
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["reward.timeout_s=0", "reward.workers=0"])
    assert info.value.problems == [
        "reward.workers=0 must be at least 1",
        "reward.timeout_s=0.0 must be > 0 (seconds one reward.function call may run), e.g. 60",
    ]
