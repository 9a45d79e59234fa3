import pytest
import torch

from megarl.registry import UnknownNameError
from megarl.rewards import (
    RewardFunctionError,
    RewardFunctionSpecError,
    RewardScorer,
    default_compute_score,
    load_reward_function,
)


def test_dispatch_by_data_source():
    assert default_compute_score("openai/gsm8k", "#### 1,000", "1000") == 1.0
    assert default_compute_score("HuggingFaceH4/MATH-500", "\\boxed{\\frac12}", "\\frac{1}{2}") == 1.0
    assert default_compute_score("lighteval/MATH", "\\boxed{3}", "3") == 1.0
    assert default_compute_score("openai/gsm8k", "it is 5", "5", method="flexible") == 1.0


def test_unknown_data_source_lists_known_ones():
    with pytest.raises(UnknownNameError) as info:
        default_compute_score("openai/gsm8", "#### 1", "1")
    assert "openai/gsm8k" in str(info.value) and "HuggingFaceH4/MATH-500" in str(info.value)
    assert "Did you mean 'openai/gsm8k'" in str(info.value)


def test_load_from_file_and_module(tmp_path):
    (tmp_path / "my_reward.py").write_text(
        "def length_reward(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):\n"
        "    return {'score': scale * len(solution_str), 'chars': len(solution_str)}\n"
        "THRESHOLD = 3\n"
    )
    fn = load_reward_function(f"{tmp_path}/my_reward.py:length_reward")
    assert fn(data_source="x", solution_str="abc", ground_truth=None, scale=2.0)["score"] == 6.0
    assert load_reward_function("megarl.rewards.math_verify:compute_score").__module__ == "megarl.rewards.math_verify"
    assert load_reward_function(None) is default_compute_score


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no_colon_here", "write it as"),
        ("{tmp}/missing.py:f", "does not exist"),
        ("{tmp}/my_reward.py:nope", "has no function 'nope'; it defines: length_reward"),
        ("{tmp}/my_reward.py:THRESHOLD", "is a int, not a function"),
        ("{tmp}/broken.py:f", "importing .* failed: SyntaxError"),
        ("not_a_real_module_xyz:f", "cannot import not_a_real_module_xyz"),
    ],
)
def test_bad_specs_name_the_problem(tmp_path, spec, message):
    (tmp_path / "my_reward.py").write_text("def length_reward(**kw):\n    return 1.0\nTHRESHOLD = 3\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    with pytest.raises(RewardFunctionSpecError, match=message):
        load_reward_function(spec.format(tmp=tmp_path))


def encode_responses(tokenizer, texts, width=None):
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    width = width or max(len(x) for x in ids) + 2
    responses = torch.full((len(ids), width), tokenizer.pad_token_id)
    mask = torch.zeros(len(ids), width)
    for i, x in enumerate(ids):
        responses[i, : len(x)] = torch.tensor(x)
        mask[i, : len(x)] = 1
    return responses, mask


def test_scorer_places_score_on_last_valid_token(tokenizer):
    responses, mask = encode_responses(tokenizer, ["so #### 72", "#### 5", "\\boxed{\\frac{1}{2}}"])
    scorer = RewardScorer(tokenizer, default_compute_score)
    result = scorer(
        responses, mask, ["openai/gsm8k", "openai/gsm8k", "HuggingFaceH4/MATH-500"], ["72", "6", "0.5"]
    )
    torch.testing.assert_close(result.scores, torch.tensor([1.0, 0.0, 1.0]))
    lengths = mask.sum(-1).long()
    for i in range(3):
        assert result.token_level_scores[i].sum() == result.scores[i]
        assert result.token_level_scores[i, lengths[i] - 1] == result.scores[i]
    assert result.num_errors == 0 and result.metrics == {"reward/num_errors": 0.0}


def test_scorer_decodes_without_special_tokens(tokenizer):
    responses, mask = encode_responses(tokenizer, ["#### 72<|im_end|>"])
    result = RewardScorer(tokenizer, default_compute_score)(responses, mask, ["openai/gsm8k"], ["72"])
    assert result.scores.tolist() == [1.0]


def test_scorer_counts_and_reports_errors_without_crashing(tokenizer, caplog):
    def flaky(data_source, solution_str, ground_truth, extra_info=None):
        if "boom" in solution_str:
            raise ZeroDivisionError("user bug")
        return {"score": 1.0, "acc": True}

    responses, mask = encode_responses(tokenizer, ["fine", "boom", "fine"])
    result = RewardScorer(tokenizer, flaky)(responses, mask, ["d"] * 3, ["g"] * 3, [{"index": i} for i in range(3)])
    assert result.scores.tolist() == [1.0, 0.0, 1.0]
    assert result.num_errors == 1 and result.metrics["reward/num_errors"] == 1.0
    assert result.extra_info == {"acc": [True, None, True]}
    assert "sample 1" in caplog.text and "ZeroDivisionError: user bug" in caplog.text and "boom" in caplog.text


def test_scorer_rejects_non_numbers_per_sample(tokenizer):
    outputs = iter([float("nan"), {"acc": 1}, "1.0", 0.5])
    responses, mask = encode_responses(tokenizer, ["a", "b", "c", "d"])
    result = RewardScorer(tokenizer, lambda **kw: next(outputs))(responses, mask, ["d"] * 4, ["g"] * 4)
    assert result.num_errors == 3 and result.scores.tolist() == [0.0, 0.0, 0.0, 0.5]


def test_a_reward_beyond_float32_is_refused_naming_its_value(tokenizer):
    def huge(**kw):
        return 1e39

    responses, mask = encode_responses(tokenizer, ["a", "b"])
    with pytest.raises(RewardFunctionError, match=r"function .*huge failed on all 2 samples.*a reward must be within "
                                                  r"float32's range .*got 1e\+39"):
        RewardScorer(tokenizer, huge)(responses, mask, ["d"] * 2, ["g"] * 2)
    result = RewardScorer(tokenizer, lambda **kw: 1e30)(responses, mask, ["d"] * 2, ["g"] * 2)
    assert result.num_errors == 0 and result.scores.tolist() == [pytest.approx(1e30)] * 2


def test_scorer_stops_when_every_sample_fails(tokenizer):
    def broken(**kw):
        raise KeyError("ground_truth")

    responses, mask = encode_responses(tokenizer, ["a", "b"])
    with pytest.raises(RewardFunctionError, match="failed on all 2 samples"):
        RewardScorer(tokenizer, broken)(responses, mask, ["d"] * 2, ["g"] * 2)


def test_scorer_propagates_unknown_data_source_and_handles_empty_responses(tokenizer):
    responses, mask = encode_responses(tokenizer, ["#### 1", "x"])
    with pytest.raises(UnknownNameError, match="unknown data_source 'gsm'"):
        RewardScorer(tokenizer, default_compute_score)(responses, mask, ["openai/gsm8k", "gsm"], ["1", "1"])
    mask[1] = 0  # an empty response: scored on "" and placed on no token
    result = RewardScorer(tokenizer, lambda **kw: 1.0)(responses, mask, ["d", "d"], ["1", "1"])
    assert result.scores.tolist() == [1.0, 1.0]
    assert result.token_level_scores[1].abs().sum() == 0
