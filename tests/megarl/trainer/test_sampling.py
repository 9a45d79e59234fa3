"""Dynamic sampling (DAPO's filter_groups) round by round: a scripted rollout role answers each round's prompts with
known responses, scored by the real rule scorer."""

from contextlib import nullcontext

from megarl.config import load_config
from megarl.rewards.registry import default_compute_score
from megarl.rewards.scorer import RewardScorer
from megarl.rollout.base import Response
from megarl.rollout.batch import with_responses
from megarl.trainer.sampling import ROUND_SEED_STRIDE, StepSampler

DAPO = ["algorithm.adv_estimator=grpo", "rollout.n=2", "data.train_batch_size=2", "actor.ppo_mini_batch_size=1",
        "algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=3"]


class ScriptedRollout:
    """The rollout role's `generate`, answering round after round from `rounds` (per prompt, its responses)."""

    def __init__(self, tokenizer, rounds):
        self.tokenizer, self.rounds = tokenizer, list(rounds)
        self.seeds, self.uids = [], []

    def generate(self, prompts, seed=None):
        self.seeds.append(seed)
        self.uids.append(list(prompts["uid"]))
        groups = [[self._response(text) for text in group] for group in self.rounds.pop(0)]
        return with_responses(prompts, groups, width=8)

    def _response(self, text):
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return Response(ids, [0.0] * len(ids), "stop")


def prompts(truths):
    while True:
        yield {"prompt_ids": [[1, 2], [3, 4]], "data_source": ["openai/gsm8k"] * 2,
               "reward_model": [{"ground_truth": t} for t in truths]}


def sample(tokenizer, rounds, *overrides, step=3):
    cfg = load_config(overrides=[*DAPO, *overrides])
    rollout = ScriptedRollout(tokenizer, rounds)
    sampler = StepSampler(rollout, cfg, RewardScorer(tokenizer, default_compute_score))
    batch, metrics = sampler(step, prompts(["5", "7"]), lambda name: nullcontext())
    return rollout, batch, metrics


def test_rounds_go_on_until_enough_groups_have_signal(tokenizer):
    rounds = [[["#### 5", "#### 5"], ["#### 7", "#### 1"]],  # first group all right: no signal
              [["#### 5", "#### 2"], ["#### 1", "#### 1"]]]  # second group all wrong: no signal
    rollout, batch, metrics = sample(tokenizer, rounds)
    assert metrics == {"reward/num_errors": 0.0, "dapo/num_gen_batches": 2.0, "dapo/kept_groups": 2.0}
    assert rollout.uids == [["6", "7"], ["8", "9"]]  # distinct within the step
    assert rollout.seeds == [1 + 3, 1 + 3 + ROUND_SEED_STRIDE]
    assert list(batch["uid"]) == ["7", "7", "8", "8"]
    assert batch["token_level_scores"].sum(-1).tolist() == [1.0, 0.0, 1.0, 0.0]


def test_out_of_rounds_the_step_trains_on_whole_mini_batches(tokenizer):
    no_signal = [["#### 5", "#### 5"], ["#### 1", "#### 1"]]
    rollout, batch, metrics = sample(tokenizer, [no_signal] * 3)
    assert len(rollout.seeds) == 3 and (metrics["dapo/num_gen_batches"], metrics["dapo/kept_groups"]) == (3.0, 0.0)
    assert list(batch["uid"]) == ["6", "6"]  # one mini-batch (one group), filled with a group without signal


def test_seq_reward_counts_the_overlong_penalty(tokenizer):
    # Both responses right, but one runs to the length limit: under seq_reward the penalty gives the group signal.
    rounds = [[["#### 5", "#### 5 5 5 5 5 5"], ["#### 7", "#### 7"]], [["#### 5", "#### 5"], ["#### 7", "#### 7"]]]
    shaping = ["reward.overlong_buffer.enable=true", "reward.overlong_buffer.len=4", "data.max_response_length=8"]
    _, batch, metrics = sample(tokenizer, rounds, *shaping, "algorithm.filter_groups.metric=seq_reward",
                               "algorithm.filter_groups.max_num_gen_batches=2")
    assert list(batch["uid"]) == ["6", "6"] and metrics["dapo/kept_groups"] == 1.0
    assert batch["overlong_penalty"][1] < 0 == batch["overlong_penalty"][0]


def test_without_filter_groups_one_round_is_the_batch(tokenizer):
    rounds = [[["#### 5", "#### 5"], ["#### 1", "#### 1"]]]
    rollout, batch, metrics = sample(tokenizer, rounds, "algorithm.filter_groups.enable=false")
    assert metrics == {"reward/num_errors": 0.0} and len(batch) == 4 and rollout.seeds == [4]
