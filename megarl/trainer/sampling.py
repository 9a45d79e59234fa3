"""A step's samples: generation and scoring of a round of prompts, and with DAPO's dynamic sampling
(`algorithm.filter_groups`) further rounds until `data.train_batch_size` groups carry signal.

A group (the rollout.n responses to one prompt) whose responses all score the same has zero advantage under the GRPO
family, so it adds nothing to the policy gradient but dilutes it. Dynamic sampling drops such groups and draws
rounds of `data.gen_batch_size` prompts until enough groups with signal are there, at most
`max_num_gen_batches` rounds (0: no limit). Short of enough after the last round, the step trains on the groups with
signal rounded down to whole mini-batches (at least one mini-batch, filled with groups without signal when there are
too few): `dapo/kept_groups` and `dapo/num_gen_batches` say so.
"""

from __future__ import annotations

import math
from typing import Callable, Iterator

from megarl.algorithms.dapo import groups_with_signal, trained_group_count
from megarl.columns import ACC, JUDGE_SCORES, RESPONSE_MASK, RM_SCORES, TOKEN_LEVEL_SCORES, UID, stage
from megarl.config.schema import MegaRLConfig
from megarl.rollout.batch import prompt_batch
from megarl.trainer import stages
from megarl.trainer.phases import Phase
from megarl.trainer.roles import Judge, RewardModel, Rollout
from megarl.trainer.stages import Score
from parallel.batch import Batch

ROUND_SEED_STRIDE = 1_000_003  # a later round's sampling seed, far from every step's first round

# A step's scored batch and its metrics, from the step, the loader's rows and the step's `phase`.
Sampler = Callable[[int, Iterator[dict], Phase], tuple[Batch, dict[str, float]]]


class StepSampler:
    """Generates and scores a step's prompts through the rollout role; `phase(name)` times each part."""

    def __init__(self, rollout: Rollout, cfg: MegaRLConfig, score: Score, reward_model: RewardModel | None = None,
                 judge: Judge | None = None):
        """`reward_model`, `judge`: the roles whose scores join the rules' (`reward.model`, `reward.judge`)."""
        self.rollout, self.score, self.reward_model, self.judge = rollout, score, reward_model, judge
        self.reward, self.judge_streams = cfg.reward, cfg.judge_streams
        self.seed, self.n = cfg.trainer.seed, cfg.rollout.n
        self.train_batch_size, self.gen_batch_size = cfg.data.train_batch_size, cfg.data.generation_batch_size
        self.remax = cfg.algorithm.adv_estimator == "remax"
        self.overlong, self.max_response_length = cfg.reward.overlong_buffer, cfg.data.max_response_length
        self.filter = cfg.algorithm.filter_groups
        # A short batch trains on whole mini-batches of every trained role.
        minis = [cfg.actor.ppo_mini_batch_size] + ([cfg.critic.ppo_mini_batch_size] if cfg.use_critic else [])
        self.mini_batch_groups = math.lcm(*minis)

    def __call__(self, step: int, rows: Iterator[dict], phase: Phase) -> tuple[Batch, dict[str, float]]:
        rounds: list[Batch] = []
        metrics: dict[str, float] = {}
        while True:
            batch, round_metrics = self._round(step, len(rounds), next(rows), phase)
            rounds.append(batch)
            for key, value in round_metrics.items():  # counts: summed over the rounds
                metrics[key] = metrics.get(key, 0.0) + value
            if not self.filter.enable:
                return batch, metrics
            signal = self.signal_groups(Batch.concat(rounds))
            limit = self.filter.max_num_gen_batches
            if len(signal) >= self.train_batch_size or (limit and len(rounds) >= limit):
                break
        batch, kept = self._select(Batch.concat(rounds), signal)
        return batch, {**metrics, "dapo/num_gen_batches": float(len(rounds)), "dapo/kept_groups": float(kept)}

    def round_prompts(self, step: int, index: int, rows: dict) -> tuple[Batch, int]:
        """A round's prompts (uids distinct within the step) and its sampling seed."""
        prompts = prompt_batch(rows, first_uid=step * self.train_batch_size + index * self.gen_batch_size)
        return prompts, self.seed + step + index * ROUND_SEED_STRIDE

    def _round(self, step: int, index: int, rows: dict, phase: Phase) -> tuple[Batch, dict[str, float]]:
        """One round's prompts, their responses, scores and shaped scores."""
        prompts, seed = self.round_prompts(step, index, rows)
        with phase("gen"):
            batch = self.rollout.generate(prompts, seed=seed)
        if self.remax:
            with phase("gen_max"):
                batch = batch.union(stages.remax_baseline(self.rollout, prompts, self.score, self.n))
        return self.scored(batch, phase)

    def scored(self, batch: Batch, phase: Phase) -> tuple[Batch, dict[str, float]]:
        """Generated responses with their scores (rules or a function, the reward model's, the judge's) and shaped
        scores."""
        by_models = self.reward_model is not None or self.judge is not None
        with phase("reward"):
            scored, metrics = stages.score(batch, self.score, with_truth_only=by_models)
        # Beside the engine, still resident: dynamic sampling may generate another round, and a released engine would
        # need the actor's weights again.
        model_scores: stages.WeightedScores = {}
        if self.reward_model is not None:
            with phase("reward_model"):
                rm_scores = self.reward_model.compute_rm_score(batch)[RM_SCORES]
            model_scores[RM_SCORES] = (rm_scores, self.reward.model.weight)
        if self.judge is not None:
            if not self.judge_streams:  # else each response was judged as it finished, within generation
                with phase("judge"):
                    batch = batch.union(self.judge.judge(batch))
            stages.check_judged(batch, self.reward.judge)
            model_scores[JUDGE_SCORES] = (batch[JUDGE_SCORES], self.reward.judge.weight)
        if by_models:
            scored = stages.add_model_scores(scored, model_scores, batch[RESPONSE_MASK], self.reward.rule_weight)
        if self.overlong.enable:
            scored = stages.shape_overlong(scored, batch[RESPONSE_MASK], self.overlong, self.max_response_length)
        return batch.union(scored), metrics

    @stage(reads=(UID, TOKEN_LEVEL_SCORES), reads_if_present=(ACC,))
    def signal_groups(self, batch: Batch) -> list[str]:
        """The uids of the groups whose responses' `algorithm.filter_groups.metric` differ."""
        values = batch[ACC] if self.filter.metric == "acc" else batch[TOKEN_LEVEL_SCORES].sum(-1)
        return groups_with_signal(batch[UID], values.tolist())

    def _select(self, batch: Batch, signal: list[str]) -> tuple[Batch, int]:
        """The groups to train on, in batch order, and how many of them carry signal."""
        count = trained_group_count(len(signal), self.train_batch_size, self.mini_batch_groups)
        with_signal = set(signal)
        without = [uid for uid in dict.fromkeys(batch[UID].tolist()) if uid not in with_signal]
        chosen = set((signal + without)[:count])
        rows = [i for i, uid in enumerate(batch[UID]) if uid in chosen]
        return batch.select(indices=rows), min(len(signal), count)
