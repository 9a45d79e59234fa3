"""The step's column contract (megarl/columns.py). RLStep is walked for PPO, GRPO, ReMax, DAPO, LoRA and the
reward-model paths with the driver's own stages and scorer, and roles that play their worker methods' declarations
(each call checks the batch against the method's contract and returns the columns it declares): every stage finds
what it reads, written by a stage before it. docs/architecture.md's column table is the declarations'."""

from contextlib import nullcontext

import pytest
import torch

from megarl.algorithms import make_kl_controller
from megarl.columns import (COLUMNS, CONTRACTS, RESPONSE_MASK, TOKEN_LEVEL_SCORES, ContractError, column_table,
                            contract_of)
from megarl.config import load_config
from megarl.rewards.registry import default_compute_score
from megarl.rewards.scorer import RewardScorer
from megarl.rollout.base import Response
from megarl.rollout.batch import with_responses
from megarl.trainer import stages
from megarl.trainer.loop import RLStep
from megarl.trainer.roles import Roles
from megarl.trainer.sampling import StepSampler
from megarl.workers.actor import ActorWorker
from megarl.workers.critic import CriticWorker
from megarl.workers.judge import JudgeWorker, Verdict, judged
from megarl.workers.reference import ReferenceWorker
from megarl.workers.reward_model import RewardModelWorker
from megarl.workers.rollout import RolloutWorker
from parallel.batch import Batch
from tests.helpers import REPO_ROOT

SMALL = ["rollout.n=2", "data.train_batch_size=2", "actor.ppo_mini_batch_size=1", "critic.ppo_mini_batch_size=1",
         "data.max_response_length=8", "model.path=unused"]
ALGORITHMS = {  # name: (overrides, columns the step's batch must end with, columns it must not have)
    "ppo": (["algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true"],
            {"values", "ref_log_prob", "token_level_rewards", "returns"}, {"reward_baselines"}),
    "grpo": (["algorithm.adv_estimator=grpo", "actor.use_kl_loss=true"], {"ref_log_prob", "advantages"}, {"values"}),
    "remax": (["algorithm.adv_estimator=remax"], {"reward_baselines"}, {"values", "ref_log_prob"}),
    "dapo": (["algorithm.adv_estimator=grpo", "algorithm.filter_groups.enable=true",
              "algorithm.filter_groups.max_num_gen_batches=2", "reward.overlong_buffer.enable=true",
              "reward.overlong_buffer.len=2"], {"overlong_penalty"}, {"ref_log_prob"}),
    "lora": (["algorithm.adv_estimator=grpo", "actor.lora.rank=4", "actor.use_kl_loss=true"], {"ref_log_prob"},
             {"values"}),
    "reward_model": (["algorithm.adv_estimator=grpo", "reward.model.path=unused"], {"rm_scores", "rule_scores"},
                     {"ref_log_prob"}),
    "judge": (["algorithm.adv_estimator=grpo", "reward.model.path=unused", "reward.judge.model.path=unused"],
              {"rm_scores", "judge_scores", "judge_parsed", "judge_prompt", "judge_output", "rule_scores"},
              {"ref_log_prob"}),
}


def played(method):
    """A worker method as a role in this process plays it: its contract checked, its declared columns returned."""
    contract = contract_of(method)

    def play(self, batch, *args, **kwargs):
        contract.check_input(batch)
        out = Batch({name: torch.zeros(len(batch)) if COLUMNS[name].shape == "[B]" else
                     torch.zeros_like(batch[RESPONSE_MASK]) for name in contract.writes})
        contract.check_output(batch, out)
        return out if contract.writes else {}

    return play


class Actor:
    compute_log_prob = played(ActorWorker.compute_log_prob)
    compute_ref_log_prob = played(ActorWorker.compute_ref_log_prob)
    update_actor = played(ActorWorker.update_actor)


class Critic:
    compute_values = played(CriticWorker.compute_values)
    update_critic = played(CriticWorker.update_critic)


class Reference:
    compute_ref_log_prob = played(ReferenceWorker.compute_ref_log_prob)


class RewardModel:
    compute_rm_score = played(RewardModelWorker.compute_rm_score)


class Judge:
    """Plays JudgeWorker.judge: every response judged 1, its output parsed."""

    def judge(self, batch):
        contract = contract_of(JudgeWorker.judge)
        contract.check_input(batch)
        out = judged([Verdict(1.0, "prompt", "1")] * len(batch), 0.0)
        contract.check_output(batch, out)
        return out


class Rollout:
    """Answers each prompt right and wrong in turn (groups with signal), the engine's log-probs all 0."""

    restarts = 0

    def __init__(self, tokenizer, n: int):
        self.tokenizer, self.n = tokenizer, n

    def generate(self, prompts, validate=False, greedy=False, seed=None):
        contract = contract_of(RolloutWorker.generate)
        contract.check_input(prompts)
        texts = ["#### 5", "#### 1"] if not greedy else ["#### 5"]
        responses = [[self._response(texts[k % len(texts)]) for k in range(1 if greedy else self.n)]
                     for _ in range(len(prompts))]
        out = with_responses(prompts, responses, width=8)
        contract.check_output(prompts, out)
        return out

    def _response(self, text):
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return Response(ids, [0.0] * len(ids), "stop")


class NoSync:
    def release(self, phase):
        pass

    def sync(self, phase=None):
        return {}


def prompts():
    while True:
        yield {"prompt_ids": [[1, 2], [3, 4]], "raw_prompt": ["2 + 3", "1 + 4"], "data_source": ["openai/gsm8k"] * 2,
               "reward_model": [{"ground_truth": "5"}] * 2}


def roles(cfg, tokenizer) -> Roles:
    actor = Actor()
    reference = Reference() if cfg.reference_model else actor if cfg.use_reference else None
    return Roles(actor, Rollout(tokenizer, cfg.rollout.n), NoSync(), Critic() if cfg.use_critic else None, reference,
                 RewardModel() if cfg.reward.model.path else None, Judge() if cfg.reward.judge.model.path else None)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_each_stage_reads_what_an_earlier_stage_wrote(tokenizer, algorithm):
    overrides, present, absent = ALGORITHMS[algorithm]
    cfg = load_config(overrides=[*SMALL, *overrides])
    cast = roles(cfg, tokenizer)
    kl = cfg.algorithm.kl_ctrl
    sample = StepSampler(cast.rollout, cfg, RewardScorer(tokenizer, default_compute_score), cast.reward_model,
                         cast.judge)
    step = RLStep(cast, cfg, sample, make_kl_controller(kl.type, kl.kl_coef, kl.target_kl, kl.horizon))
    batch, metrics = step(1, prompts())
    assert present <= set(batch.keys()) and not absent & set(batch.keys()), sorted(batch.keys())
    stages.data_metrics(batch, cfg.data.max_response_length)
    assert "timing_s/update_actor" in metrics


def test_a_stage_without_a_column_it_reads_names_the_stage_that_writes_it():
    algorithm = load_config(overrides=["algorithm.adv_estimator=grpo", "rollout.n=2"]).algorithm
    with pytest.raises(ContractError, match=r"stages.advantages reads \['token_level_rewards'\], which the batch "
                                            r"lacks \(written by: \{'token_level_rewards': \['stages.rewards'\]\}\)"):
        stages.advantages(Batch({RESPONSE_MASK: torch.ones(2, 3)}, {"uid": ["0", "0"]}), algorithm)


def test_a_stage_that_writes_a_column_it_does_not_declare_is_refused():
    scored = Batch({TOKEN_LEVEL_SCORES: torch.zeros(2, 3)})
    with pytest.raises(ContractError, match=r"stages.shape_overlong wrote \['values'\], which it does not declare"):
        contract_of(stages.shape_overlong).check_output(scored, scored.union(Batch({"values": torch.zeros(2, 3)})))


def test_the_architecture_doc_shows_the_declared_columns():
    text = (REPO_ROOT / "docs/architecture.md").read_text()
    table = text.split("<!-- columns: begin -->\n")[1].split("\n<!-- columns: end -->")[0]
    assert table == column_table(CONTRACTS), "docs/architecture.md's column table, as the declarations make it:\n" \
        + column_table(CONTRACTS)
