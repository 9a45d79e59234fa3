import pytest

from megarl.rollout.base import Response
from megarl.rollout.batch import prompt_batch, with_responses
from tests.helpers import responses_batch


def test_each_prompt_is_followed_by_its_responses():
    batch = responses_batch()
    assert list(batch["uid"]) == ["10", "10", "11", "11"] and list(batch["data_source"])[1:3] == ["gsm8k", "math"]
    assert batch["responses"].tolist() == [[7, 8, 0], [9, 0, 0], [6, 6, 6], [5, 4, 0]]
    assert batch["response_mask"].tolist() == [[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]]
    assert batch["rollout_log_probs"][0].tolist() == pytest.approx([-0.1, -0.2, 0.0])
    assert list(batch["finish_reason"]) == ["stop", "length", "length", "stop"]


def test_response_groups_must_match_the_prompts():
    prompts = prompt_batch({"prompt_ids": [[1], [2]]})
    with pytest.raises(ValueError, match="1 response groups for 2 prompts"):
        with_responses(prompts, [[Response([3], [0.0], "stop")]])
    with pytest.raises(ValueError, match="same number of responses"):
        with_responses(prompts, [[Response([3], [0.0], "stop")], []])


def test_responses_without_the_engines_log_probs_have_no_log_prob_column():
    prompts = prompt_batch({"prompt_ids": [[1, 2]]})
    batch = with_responses(prompts, [[Response([3], None, "stop"), Response([4, 5], None, "length")]], width=3)
    assert "rollout_log_probs" not in batch and batch["response_mask"].sum().item() == 3
    with pytest.raises(ValueError, match="some responses carry the engine's log-probs and some do not"):
        with_responses(prompts, [[Response([3], [-0.5], "stop"), Response([4], None, "stop")]])


def test_responses_pad_to_a_common_width():
    prompts = prompt_batch({"prompt_ids": [[1, 2]]})
    batch = with_responses(prompts, [[Response([3], [0.0], "stop"), Response([4, 5], [0.0, 0.0], "stop")]], width=4)
    assert batch["responses"].shape == (2, 4) and batch["response_mask"].sum().item() == 3
    with pytest.raises(ValueError, match="does not fit"):
        with_responses(prompts, [[Response([3, 4, 5], [0.0] * 3, "length")]], width=2)


def test_a_multi_turn_response_masks_its_tool_tokens_and_keeps_its_length():
    from megarl.columns import response_lengths
    from megarl.rollout.base import AgentStats

    turns = Response([5, 6, 7, 8, 9], [-0.1, -0.2, 0.0, 0.0, -0.3], "answer", loss_mask=[1, 1, 0, 0, 1],
                     agent=AgentStats(assistant_turns=2, tool_calls=1))
    batch = with_responses(prompt_batch({"prompt_ids": [[1, 2]]}), [[turns]], width=7)
    assert batch["response_mask"].tolist() == [[1, 1, 0, 0, 1, 0, 0]]
    assert response_lengths(batch["response_mask"]).tolist() == [5]
    assert batch["agent_stats"][0].tool_calls == 1 and batch["finish_reason"][0] == "answer"
