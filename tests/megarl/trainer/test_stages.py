import pytest
import torch

from megarl.algorithms import make_kl_controller
from megarl.config import load_config
from megarl.rewards.registry import default_compute_score
from megarl.rewards.scorer import RewardScorer
from megarl.rollout.base import Response
from megarl.rollout.batch import prompt_batch, with_responses
from megarl.trainer.stages import (add_model_scores, advantages, agent_metrics, data_metrics, rewards, score,
                                   shape_overlong)
from parallel.batch import Batch


@pytest.fixture
def batch(tokenizer):
    def encode(text):
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    prompts = prompt_batch({"prompt_ids": [encode("How many clips?"), encode("Natalia sold")],
                            "data_source": ["openai/gsm8k", "openai/gsm8k"],
                            "reward_model": [{"ground_truth": "72"}, {"ground_truth": "48"}]})
    texts = [["The answer is #### 72", "#### 71"], ["#### 48", "so #### 48"]]
    responses = [[Response(encode(t), [0.0] * len(encode(t)), "stop") for t in group] for group in texts]
    return with_responses(prompts, responses)


def test_scores_sit_on_each_response_last_token(batch, tokenizer):
    scored, metrics = score(batch, RewardScorer(tokenizer, default_compute_score))
    scores = scored["token_level_scores"]
    assert scores.sum(-1).tolist() == [1.0, 0.0, 1.0, 1.0] and metrics == {"reward/num_errors": 0.0}
    last = batch["response_mask"].sum(-1).long() - 1
    assert torch.equal(scores[torch.arange(4), last], scores.sum(-1))
    assert scored["acc"].tolist() == [1.0, 0.0, 1.0, 1.0]  # rule rewards return no "acc": their score stands in


def test_acc_is_the_functions_own_where_it_returns_one(batch, tokenizer):
    def graded(data_source, solution_str, ground_truth, extra_info=None):
        return {"score": 0.5, "acc": ground_truth in solution_str}

    scored, _ = score(batch, RewardScorer(tokenizer, graded))
    assert scored["acc"].tolist() == [1.0, 0.0, 1.0, 1.0] and scored["token_level_scores"].sum(-1).tolist() == [0.5] * 4


def test_overlong_shaping_lowers_the_last_tokens_score_of_long_responses(batch, tokenizer):
    scored, _ = score(batch, RewardScorer(tokenizer, default_compute_score))
    lengths = batch["response_mask"].sum(-1).long()
    limit = int(lengths.max())
    buffer = load_config(overrides=["reward.overlong_buffer.enable=true", "reward.overlong_buffer.len=2",
                                    "reward.overlong_buffer.penalty_factor=1.0"]).reward.overlong_buffer
    shaped = shape_overlong(scored, batch["response_mask"], buffer, limit)
    expected = torch.clamp(-(lengths.float() - (limit - 2)) / 2, max=0.0)  # −1 at the limit, 0 two tokens before
    assert torch.equal(shaped["overlong_penalty"], expected) and expected.min() == -1.0
    assert torch.allclose(shaped["token_level_scores"].sum(-1), scored["token_level_scores"].sum(-1) + expected)
    assert torch.count_nonzero(shaped["token_level_scores"] - scored["token_level_scores"]) == (expected < 0).sum()
    metrics = data_metrics(shaped.union(batch).union(Batch({"token_level_rewards": shaped["token_level_scores"],
                                                            "advantages": torch.zeros(lengths.shape[0], limit),
                                                            "returns": torch.zeros(lengths.shape[0], limit)})), limit)
    assert metrics["reward/overlong_ratio"] == pytest.approx((expected < 0).float().mean().item())


def test_kl_in_reward_penalises_and_updates_the_controller(batch):
    scores = Batch({"token_level_scores": torch.ones(batch["responses"].shape) * batch["response_mask"]})
    batch = batch.union(scores).union(Batch({"old_log_probs": torch.zeros(batch["responses"].shape),
                                             "ref_log_prob": torch.full(batch["responses"].shape, -0.5)}))
    plain, metrics = rewards(batch, load_config().algorithm, None)
    assert torch.equal(plain["token_level_rewards"], batch["token_level_scores"]) and metrics == {}
    algorithm = load_config(overrides=["algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive",
                                       "algorithm.kl_ctrl.kl_coef=0.1"]).algorithm
    controller = make_kl_controller("adaptive", 0.1, target_kl=0.1, horizon=10)
    penalised, metrics = rewards(batch, algorithm, controller)
    expected = (batch["token_level_scores"] - 0.1 * 0.5 * batch["response_mask"])
    assert torch.allclose(penalised["token_level_rewards"], expected)
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(0.5) and controller.value != 0.1


def test_grpo_advantages_are_relative_to_the_prompts_group(batch):
    scores = torch.zeros(batch["responses"].shape)
    last = batch["response_mask"].sum(-1).long() - 1
    scores[torch.arange(4), last] = torch.tensor([1.0, 0.0, 1.0, 1.0])
    batch = batch.union(Batch({"token_level_scores": scores, "token_level_rewards": scores}))
    algorithm = load_config(overrides=["algorithm.adv_estimator=grpo", "rollout.n=2"]).algorithm
    out = advantages(batch, algorithm)
    per_sequence = [row[m.bool()][0].item() for row, m in zip(out["advantages"], batch["response_mask"])]
    assert per_sequence[0] > 0 > per_sequence[1] and per_sequence[2:] == [0.0, 0.0]  # the second group ties
    metrics = data_metrics(batch.union(out), max_response_length=4)
    assert metrics["critic/score/mean"] == 0.75 and metrics["response_length/max"] == 5
    assert metrics["response_length/clip_ratio"] == 0.5  # responses of ≥ 4 tokens hit the limit


def test_gae_uses_the_critic_values(batch):
    rewards_ = torch.zeros(batch["responses"].shape)
    batch = batch.union(Batch({"token_level_rewards": rewards_, "values": torch.ones(rewards_.shape)}))
    out = advantages(batch, load_config().algorithm)  # gae, gamma = lam = 1: returns are the rewards to go
    assert torch.allclose(out["returns"] * batch["response_mask"], rewards_)


def test_a_reward_models_score_joins_the_rules_on_the_last_token(batch, tokenizer):
    scored, _ = score(batch, RewardScorer(tokenizer, default_compute_score))
    model_scores = torch.tensor([0.5, -1.0, 2.0, 0.25])
    combined = add_model_scores(scored, {"rm_scores": (model_scores, 2.0)}, batch["response_mask"], 0.5)
    assert combined["token_level_scores"].sum(-1).tolist() == [1.5, -2.0, 4.5, 1.0]
    last = batch["response_mask"].sum(-1).long() - 1
    assert torch.equal(combined["token_level_scores"][torch.arange(4), last], combined["token_level_scores"].sum(-1))
    assert combined["rule_scores"].tolist() == [1.0, 0.0, 1.0, 1.0] and torch.equal(combined["rm_scores"], model_scores)
    metrics = data_metrics(batch.union(combined).union(Batch({
        "token_level_rewards": combined["token_level_scores"], "advantages": combined["token_level_scores"],
        "returns": combined["token_level_scores"]})), 16)
    assert metrics["reward/model_score/mean"] == pytest.approx(0.4375)
    assert metrics["reward/rule_score/mean"] == pytest.approx(0.75)


def test_a_judges_score_joins_the_rules_and_the_reward_models_by_its_weight(batch, tokenizer):
    scored, _ = score(batch, RewardScorer(tokenizer, default_compute_score))
    rm, judge = torch.tensor([0.5, -1.0, 2.0, 0.25]), torch.tensor([8.0, 0.0, 3.0, 10.0])
    combined = add_model_scores(scored, {"rm_scores": (rm, 2.0), "judge_scores": (judge, 0.1)},
                                batch["response_mask"], 0.5)
    assert combined["token_level_scores"].sum(-1).tolist() == pytest.approx([2.3, -2.0, 4.8, 2.0])
    assert torch.equal(combined["judge_scores"], judge)
    parsed = Batch({"judge_parsed": torch.tensor([1.0, 0.0, 1.0, 1.0])})
    metrics = data_metrics(batch.union(combined).union(parsed).union(Batch({
        "token_level_rewards": combined["token_level_scores"], "advantages": combined["token_level_scores"],
        "returns": combined["token_level_scores"]})), 16)
    assert (metrics["reward/judge_score/mean"], metrics["reward/judge_score/min"],
            metrics["reward/judge_score/max"], metrics["reward/judge_unparsed"]) == (5.25, 0.0, 10.0, 1.0)


def test_with_a_reward_model_rows_without_ground_truth_skip_the_rules(batch, tokenizer):
    missing = Batch(batch.tensors, {**batch.fields, "reward_model": [{"ground_truth": "72"}, {"ground_truth": None},
                                                                    {}, {"ground_truth": "48"}]})
    scorer = RewardScorer(tokenizer, default_compute_score)
    scored, metrics = score(missing, scorer, with_truth_only=True)
    assert scored["token_level_scores"].sum(-1).tolist() == [1.0, 0.0, 0.0, 1.0]
    assert scored["acc"].tolist() == [1.0, 0.0, 0.0, 1.0] and metrics == {"reward/num_errors": 0.0}
    none = Batch(batch.tensors, {**batch.fields, "reward_model": [{}] * 4})
    assert score(none, scorer, with_truth_only=True)[0]["token_level_scores"].abs().sum() == 0
    assert score(missing, scorer)[1] == {"reward/num_errors": 2.0}  # rules alone: each such row is a failure


def test_data_metrics_say_how_many_prompts_responses_differ_and_verls_extremes(batch):
    scores = torch.zeros(batch["responses"].shape)
    last = batch["response_mask"].sum(-1).long() - 1
    scores[torch.arange(4), last] = torch.tensor([1e30, 0.0, 1.0, 1.0])
    batch = batch.union(Batch({"token_level_scores": scores, "token_level_rewards": scores}))
    out = advantages(batch, load_config(overrides=["algorithm.adv_estimator=grpo", "rollout.n=2"]).algorithm)
    metrics = data_metrics(batch.union(out), max_response_length=4)
    assert metrics["critic/score/varied_ratio"] == 0.5  # the first prompt's responses differ, the second's tie
    assert metrics["critic/score/max"] == pytest.approx(1e30) and metrics["critic/score/min"] == 0.0
    assert metrics["critic/advantages/max"] > 0.5 > -0.5 > metrics["critic/advantages/min"]


def test_agent_metrics_count_turns_finishes_and_tool_calls():
    from megarl.rollout.base import AgentStats

    stats = [AgentStats(assistant_turns=2, tool_calls=1, tool_seconds=0.5, engine_tool_wall_s=0.4),
             AgentStats(assistant_turns=1, engine_tool_wall_s=0.4),
             AgentStats(assistant_turns=3, tool_calls=2, tool_errors=1, tool_timeouts=1, tool_seconds=1.0,
                        engine_tool_wall_s=0.7)]
    batch = Batch(fields={"agent_stats": stats, "finish_reason": ["answer", "answer", "max_turns"]})
    assert agent_metrics(batch) == pytest.approx({
        "multi_turn/assistant_turns/mean": 2.0, "multi_turn/assistant_turns/max": 3.0,
        "multi_turn/finish/answer": 2 / 3, "multi_turn/finish/max_turns": 1 / 3, "multi_turn/finish/max_tokens": 0.0,
        "tool/calls_per_sample": 1.0, "tool/errors": 1.0, "tool/timeouts": 1.0, "tool/latency_s": 0.5,
        "timing_s/tools": 0.7})
