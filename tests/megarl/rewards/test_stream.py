"""Scoring beside generation (the rollout's async mode): responses handed over one by one are scored in a thread
while the caller goes on, and the batch result made from their outcomes is the one the batch scorer computes."""

import threading

import pytest

from megarl.config.schema import RewardConfig
from megarl.registry import UnknownNameError
from megarl.rewards import RewardScorer
from megarl.rewards.registry import default_compute_score
from megarl.rewards.stream import StreamingScorer
from tests.megarl.rewards.test_dispatch import encode_responses
from tests.megarl.rewards.test_pool import spec  # noqa: F401 (a fixture)

TEXTS = ["so #### 72", "#### 5", "no answer", "#### 72", "boom"]
SOURCES = ["openai/gsm8k"] * 4 + ["d"]
TRUTHS = ["72", "6", "72", "72", "x"]


def stream_all(scorer, responses, mask, sources=SOURCES, truths=TRUTHS):
    lengths = mask.sum(-1).long().tolist()
    with StreamingScorer(scorer, len(lengths)) as stream:
        for i in reversed(range(len(lengths))):  # out of order, as responses finish
            stream.submit(i, responses[i, : lengths[i]].tolist(), sources[i], truths[i], None)
        return stream.outcomes()


def assert_same_result(streamed, batch):
    assert streamed.token_level_scores.equal(batch.token_level_scores) and streamed.scores.equal(batch.scores)
    assert (streamed.extra_info, streamed.metrics) == (batch.extra_info, batch.metrics)


def test_rule_outcomes_scored_one_by_one_make_the_batch_result(tokenizer):
    def rules(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "boom":
            raise ZeroDivisionError("user bug")
        return default_compute_score("openai/gsm8k", solution_str, ground_truth)

    scorer = RewardScorer(tokenizer, rules)
    responses, mask = encode_responses(tokenizer, TEXTS)
    outcomes = stream_all(scorer, responses, mask)
    assert [o.score for o in outcomes] == [1.0, 0.0, 0.0, 1.0, 0.0] and outcomes[4].error_type == "ZeroDivisionError"
    streamed = scorer(responses, mask, SOURCES, TRUTHS, outcomes=outcomes)
    assert_same_result(streamed, scorer(responses, mask, SOURCES, TRUTHS))
    assert streamed.num_errors == 1


@pytest.mark.timeout(60)
def test_outcomes_from_a_reward_pool_make_the_batch_result(tokenizer, spec):  # noqa: F811
    config = RewardConfig(spec, {"bonus": 0.5}, timeout_s=10.0, workers=2)
    with RewardScorer.from_config(tokenizer, config) as scorer:
        responses, mask = encode_responses(tokenizer, ["fine", "boom", "fine", "fine"])
        sources, truths = ["d"] * 4, ["g"] * 4
        outcomes = stream_all(scorer, responses, mask, sources, truths)
        streamed = scorer(responses, mask, sources, truths, outcomes=outcomes)
        batch = scorer(responses, mask, sources, truths)
    assert streamed.scores.tolist() == [1.5, 0.0, 1.5, 1.5] and streamed.num_errors == 1
    assert streamed.token_level_scores.equal(batch.token_level_scores) and streamed.metrics == batch.metrics


@pytest.mark.timeout(60)
def test_scoring_runs_while_the_caller_goes_on(tokenizer):
    """The function waits for an event that the caller sets only after `submit` returned: a submit that scored
    in place would wait forever (here: fail after the wait's timeout)."""
    released, threads = threading.Event(), []

    def waits(data_source, solution_str, ground_truth, extra_info=None):
        threads.append(threading.current_thread().name)
        return float(released.wait(timeout=20))

    responses, mask = encode_responses(tokenizer, ["#### 1"])
    with StreamingScorer(RewardScorer(tokenizer, waits), 2) as stream:
        stream.submit(1, responses[0].tolist()[:2], "openai/gsm8k", "1", None)
        released.set()
        outcomes = stream.outcomes()
    assert outcomes[0] is None and outcomes[1].score == 1.0
    assert threads == ["megarl-streaming-scorer"]


def test_a_data_error_stops_the_batch_when_its_outcomes_are_taken(tokenizer):
    responses, mask = encode_responses(tokenizer, ["#### 1"])
    with StreamingScorer(RewardScorer(tokenizer, default_compute_score), 1) as stream:
        stream.submit(0, responses[0].tolist(), "no/such_source", "1", None)
        with pytest.raises(UnknownNameError, match="no/such_source"):
            stream.outcomes()
