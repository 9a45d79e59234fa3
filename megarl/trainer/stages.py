"""The loop's driver-side stages, each a function of the step's `Batch` that returns new columns or metrics: rule or
custom scores (and DAPO's overlong shaping), ReMax's greedy baseline, the engine/trainer log-prob gate and
rollout correction, KL-penalised rewards, advantages, and verl's data metrics. Each declares the columns it reads
and writes (`@stage`, megarl/columns.py)."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from megarl.algorithms import apply_kl_penalty, compute_advantage, masked_mean
from megarl.algorithms.dapo import overlong_penalty
from megarl.algorithms.rollout_correction import rollout_correction
from megarl.columns import (ACC, ADVANTAGES, AGENT_STATS, DATA_SOURCE, EXTRA_INFO, FINISH_REASON, JUDGE_AFTER_GEN_S,
                            JUDGE_OUTPUT, JUDGE_PARSED, JUDGE_SCORES, OLD_LOG_PROBS, OVERLONG_PENALTY, PRED, PROMPT_IDS,
                            REF_LOG_PROB, RESPONSE_MASK, RESPONSES, RETURNS, REWARD_BASELINES, REWARD_MODEL,
                            REWARD_OUTCOME, RM_SCORES, ROLLOUT_IS_WEIGHTS, ROLLOUT_LOG_PROBS, ROLLOUT_RS_MASK,
                            ROUTING_FLIPS, RULE_SCORES, TOKEN_LEVEL_REWARDS, TOKEN_LEVEL_SCORES, UID, VALUES,
                            response_lengths, stage)
from megarl.config.schema import AlgorithmConfig, JudgeConfig, OverlongBufferConfig, RolloutCorrectionConfig
from megarl.rewards.scorer import RewardResult
from megarl.rollout.batch import ground_truths, rule_scored
from megarl.rollout.gates import check_logprob_agreement, logprob_agreement
from megarl.trainer.roles import Rollout
from parallel.batch import Batch


Score = Callable[..., RewardResult]  # a RewardScorer, or the loop's wrapper that scores once for every rank


@stage(reads=(RESPONSES, RESPONSE_MASK, DATA_SOURCE, REWARD_MODEL), writes=(TOKEN_LEVEL_SCORES, ACC),
       reads_if_present=(EXTRA_INFO, REWARD_OUTCOME), may_write=(PRED,))
def score(batch: Batch, scorer: Score, with_truth_only: bool = False) -> tuple[Batch, dict[str, float]]:
    """`token_level_scores` [B, R]: each response's score on its last token (scored here, or as the response
    finished where the rollout's async mode left its outcome in `reward_outcome`); `acc` [B]: the reward function's
    "acc" where it returns one (DAPO's scorers do), else its score; `pred`: the answer it read, where it returns
    one (verl's convention; the sample logs show it). `with_truth_only` (a reward model scores too): rows without
    a ground truth are left unscored (0) instead of failing."""
    truths = ground_truths(batch)
    rows = [i for i, truth in enumerate(truths) if rule_scored(truth, with_truth_only)]
    if len(rows) < len(batch):
        return _score_rows(batch, scorer, rows)
    extra = list(batch[EXTRA_INFO]) if EXTRA_INFO in batch else None
    scored = list(batch[REWARD_OUTCOME]) if REWARD_OUTCOME in batch else None  # the rollout's async mode
    result = scorer(batch[RESPONSES], batch[RESPONSE_MASK], list(batch[DATA_SOURCE]), truths, extra, scored)
    accuracy = result.extra_info.get("acc", [None] * len(batch))
    acc = torch.tensor([float(a) if a is not None else float(s) for a, s in zip(accuracy, result.scores.tolist())])
    preds = {PRED: result.extra_info["pred"]} if "pred" in result.extra_info else {}
    return Batch({TOKEN_LEVEL_SCORES: result.token_level_scores, ACC: acc}, preds), result.metrics


def _score_rows(batch: Batch, scorer: Score, rows: list[int]) -> tuple[Batch, dict[str, float]]:
    """`score` of the chosen rows, zeros (and no `pred`) elsewhere."""
    scores, acc = torch.zeros_like(batch[RESPONSE_MASK]), torch.zeros(len(batch))
    if not rows:
        return Batch({TOKEN_LEVEL_SCORES: scores, ACC: acc}), {"reward/num_errors": 0.0}
    part, metrics = score(batch.select(indices=rows), scorer)
    index = torch.tensor(rows)
    scores[index], acc[index] = part[TOKEN_LEVEL_SCORES], part[ACC]
    return Batch({TOKEN_LEVEL_SCORES: scores, ACC: acc}), metrics


# A model's scores [B] and their weight in each response's score: the reward model's (`rm_scores`,
# reward.model.weight), the judge's (`judge_scores`, reward.judge.weight).
WeightedScores = dict[str, tuple[torch.Tensor, float]]


@stage(reads=(TOKEN_LEVEL_SCORES,), writes=(TOKEN_LEVEL_SCORES, RULE_SCORES), may_write=(RM_SCORES, JUDGE_SCORES))
def add_model_scores(scored: Batch, model_scores: WeightedScores, response_mask: torch.Tensor,
                     rule_weight: float) -> Batch:
    """Each response's score becomes `rule_weight` × its rule score + each model's weight × that model's score, on
    its last token; `rule_scores` and each model's column [B] keep them apart (their metrics)."""
    lengths = response_lengths(response_mask)
    rows = torch.nonzero(lengths > 0).squeeze(-1)
    rule_scores = scored[TOKEN_LEVEL_SCORES].sum(-1)
    combined = scored[TOKEN_LEVEL_SCORES] * rule_weight
    for scores, weight in model_scores.values():
        combined[rows, lengths[rows] - 1] += weight * scores[rows].to(combined.dtype)
    kept = {column: scores.float() for column, (scores, _) in model_scores.items()}
    return Batch({**scored.tensors, TOKEN_LEVEL_SCORES: combined, RULE_SCORES: rule_scores, **kept}, scored.fields)


class JudgeUnparsedError(RuntimeError):
    """No output of the judge's parsed in a whole batch: its prompt or its parser is wrong, not one answer."""


@stage(reads=(JUDGE_PARSED, JUDGE_OUTPUT))
def check_judged(judged: Batch, judge: JudgeConfig) -> None:
    """Raise JudgeUnparsedError where no response of the batch got a parsed score: every reward would be
    `reward.judge.unparsed_score`, a constant the policy cannot learn from."""
    if len(judged) and not judged[JUDGE_PARSED].any():
        parse = judge.parse
        raise JudgeUnparsedError(
            f"none of the judge's {len(judged)} outputs of the batch parsed (reward.judge.parse.type={parse.type}"
            + (f", pattern={parse.pattern!r}" if parse.type == "regex" else "")
            + (f", on the scale [{parse.min}, {parse.max}]" if parse.type == "last_number" else "")
            + f"): fix reward.judge.prompt so that the judge answers as the parser reads, or the parser.\n"
            f"The template (reward.judge.prompt):\n{judge.prompt}\n"
            f"The judge's output for the first response:\n{judged[JUDGE_OUTPUT][0]}")


@stage(reads=(TOKEN_LEVEL_SCORES,), writes=(TOKEN_LEVEL_SCORES, OVERLONG_PENALTY))
def shape_overlong(scored: Batch, response_mask: torch.Tensor, buffer: OverlongBufferConfig,
                   max_response_length: int) -> Batch:
    """DAPO's overlong penalty added to each response's score on its last token, and as `overlong_penalty` [B]."""
    lengths = response_lengths(response_mask)
    penalty = overlong_penalty(lengths, max_response_length, buffer.len, buffer.penalty_factor)
    scores = scored[TOKEN_LEVEL_SCORES].clone()
    rows = torch.nonzero(lengths > 0).squeeze(-1)
    scores[rows, lengths[rows] - 1] += penalty[rows].to(scores.dtype)
    return Batch({**scored.tensors, TOKEN_LEVEL_SCORES: scores, OVERLONG_PENALTY: penalty}, scored.fields)


@stage(reads=(PROMPT_IDS,), writes=(REWARD_BASELINES,))
def remax_baseline(rollout: Rollout, prompts: Batch, scorer: Score, samples_per_prompt: int) -> Batch:
    """`reward_baselines` [B]: ReMax's baseline, the score of each prompt's greedy response (from the rollout
    role), repeated for the prompt's samples."""
    greedy, _ = score(rollout.generate(prompts, greedy=True), scorer)
    return Batch({REWARD_BASELINES: greedy[TOKEN_LEVEL_SCORES].sum(-1).repeat_interleave(samples_per_prompt)})


@stage(reads=(ROLLOUT_LOG_PROBS, OLD_LOG_PROBS, RESPONSE_MASK))
def logprob_gate(batch: Batch, max_mult_error: float | None) -> dict[str, float]:
    """`rollout/logprob_*`: how far the engine's log-probs are from the trainer's `old_log_probs`; raises past
    `max_mult_error` (None: measure only)."""
    gate = logprob_agreement(batch[ROLLOUT_LOG_PROBS], batch[OLD_LOG_PROBS], batch[RESPONSE_MASK])
    if max_mult_error is not None:
        check_logprob_agreement(gate, max_mult_error)
    return gate


@stage(reads=(OLD_LOG_PROBS, ROLLOUT_LOG_PROBS, RESPONSE_MASK), may_write=(ROLLOUT_IS_WEIGHTS, ROLLOUT_RS_MASK))
def correct_rollout(batch: Batch, correction: RolloutCorrectionConfig) -> tuple[Batch, dict[str, float]]:
    """`rollout_is_weights` (with `rollout_is`) and `rollout_rs_mask` (with rejection or a veto) for the actor's loss,
    from the engine's and the trainer's log-probs; `rollout_corr/*` metrics."""
    result = rollout_correction(
        batch[OLD_LOG_PROBS], batch[ROLLOUT_LOG_PROBS], batch[RESPONSE_MASK], is_level=correction.rollout_is,
        is_threshold=correction.rollout_is_threshold, rs_level=correction.rollout_rs, rs_upper=correction.rs_upper,
        rs_lower=correction.rs_lower, veto_threshold=correction.rollout_token_veto_threshold)
    columns = {ROLLOUT_IS_WEIGHTS: result.weights} if result.weights is not None else {}
    if correction.rollout_rs is not None or correction.rollout_token_veto_threshold is not None:
        columns[ROLLOUT_RS_MASK] = result.keep
    return Batch(columns), result.metrics


@stage(reads=(TOKEN_LEVEL_SCORES,), writes=(TOKEN_LEVEL_REWARDS,),
       reads_if_present=(OLD_LOG_PROBS, REF_LOG_PROB, RESPONSE_MASK))
def rewards(batch: Batch, algorithm: AlgorithmConfig, kl_controller) -> tuple[Batch, dict[str, float]]:
    """`token_level_rewards`: the scores, minus β·KL(actor ‖ reference) per token with `use_kl_in_reward` (β from
    the controller, which the batch's KL then updates)."""
    if not algorithm.use_kl_in_reward:
        return Batch({TOKEN_LEVEL_REWARDS: batch[TOKEN_LEVEL_SCORES]}), {}
    penalised, current_kl = apply_kl_penalty(batch[TOKEN_LEVEL_SCORES], batch[OLD_LOG_PROBS],
                                             batch[REF_LOG_PROB], batch[RESPONSE_MASK], kl_controller.value,
                                             algorithm.kl_penalty)
    metrics = {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": kl_controller.value}
    kl_controller.update(current_kl, n_steps=len(batch))
    return Batch({TOKEN_LEVEL_REWARDS: penalised}), metrics


@stage(reads=(TOKEN_LEVEL_REWARDS, RESPONSE_MASK, UID), writes=(ADVANTAGES, RETURNS),
       reads_if_present=(VALUES, REWARD_BASELINES))
def advantages(batch: Batch, algorithm: AlgorithmConfig) -> Batch:
    """`advantages` and `returns` [B, R] from the registered estimator; responses of one prompt share a `uid`."""
    advantage, returns = compute_advantage(
        algorithm.adv_estimator,
        token_level_rewards=batch[TOKEN_LEVEL_REWARDS], response_mask=batch[RESPONSE_MASK],
        values=batch[VALUES] if VALUES in batch else None, index=np.asarray(batch[UID]),
        reward_baselines=batch[REWARD_BASELINES] if REWARD_BASELINES in batch else None,
        gamma=algorithm.gamma, lam=algorithm.lam, norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo,
    )
    return Batch({ADVANTAGES: advantage, RETURNS: returns})


@stage(reads=(RESPONSE_MASK, TOKEN_LEVEL_SCORES, TOKEN_LEVEL_REWARDS, ADVANTAGES, RETURNS),
       reads_if_present=(UID, VALUES, RM_SCORES, RULE_SCORES, JUDGE_SCORES, JUDGE_PARSED, JUDGE_AFTER_GEN_S,
                         OVERLONG_PENALTY, AGENT_STATS))
def data_metrics(batch: Batch, max_response_length: int) -> dict[str, float]:
    """verl's `critic/*` and `response_length/*` metrics of a scored, rewarded, advantaged batch (and with
    overlong shaping, the mean penalty and the fraction of responses penalised)."""
    mask = batch[RESPONSE_MASK]
    lengths = response_lengths(mask).float()
    scores = batch[TOKEN_LEVEL_SCORES].sum(-1)
    valid_advantages = batch[ADVANTAGES][mask.bool()]
    metrics = {
        "critic/score/mean": scores.mean().item(),
        "critic/score/max": scores.max().item(),
        "critic/score/min": scores.min().item(),
        "critic/rewards/mean": batch[TOKEN_LEVEL_REWARDS].sum(-1).mean().item(),
        "critic/advantages/mean": masked_mean(batch[ADVANTAGES], mask).item(),
        "critic/advantages/max": valid_advantages.max().item() if valid_advantages.numel() else 0.0,
        "critic/advantages/min": valid_advantages.min().item() if valid_advantages.numel() else 0.0,
        "critic/returns/mean": masked_mean(batch[RETURNS], mask).item(),
        "response_length/mean": lengths.mean().item(),
        "response_length/max": lengths.max().item(),
        "response_length/min": lengths.min().item(),
        "response_length/clip_ratio": (lengths >= max_response_length).float().mean().item(),
    }
    if UID in batch:
        metrics["critic/score/varied_ratio"] = varied_ratio(scores, list(batch[UID]))
    if VALUES in batch:
        metrics["critic/values/mean"] = masked_mean(batch[VALUES], mask).item()
    if RULE_SCORES in batch:
        metrics["reward/rule_score/mean"] = batch[RULE_SCORES].mean().item()
    if RM_SCORES in batch:
        metrics["reward/model_score/mean"] = batch[RM_SCORES].mean().item()
    if JUDGE_SCORES in batch:
        judged = batch[JUDGE_SCORES]
        metrics.update({"reward/judge_score/mean": judged.mean().item(), "reward/judge_score/min": judged.min().item(),
                        "reward/judge_score/max": judged.max().item(),
                        "reward/judge_unparsed": float((batch[JUDGE_PARSED] == 0).sum().item())})
    if JUDGE_AFTER_GEN_S in batch:  # judged as responses finished: what the judge added after generation
        after = batch[JUDGE_AFTER_GEN_S]
        metrics["reward/judge_after_gen_s/max"] = after.max().item()
        metrics["reward/judge_during_gen"] = (after == 0).float().mean().item()
    if OVERLONG_PENALTY in batch:
        metrics["reward/overlong_penalty/mean"] = batch[OVERLONG_PENALTY].mean().item()
        metrics["reward/overlong_ratio"] = (batch[OVERLONG_PENALTY] < 0).float().mean().item()
    if ROUTING_FLIPS in batch:  # router replay (R3): the trainer's own routing against the engine's
        metrics["rollout/routing_flip_frac"] = batch[ROUTING_FLIPS].mean().item()
    if AGENT_STATS in batch:
        metrics.update(agent_metrics(batch))
    return metrics


@stage(reads=(AGENT_STATS, FINISH_REASON))
def agent_metrics(batch: Batch) -> dict[str, float]:
    """The agent loop's `multi_turn/*` and `tool/*` metrics, and `timing_s/tools`: the wall time with a tool call
    running (its engine's; the longest where several engines generate at once)."""
    stats, finishes = list(batch[AGENT_STATS]), list(batch[FINISH_REASON])
    turns = [s.assistant_turns for s in stats]
    calls = sum(s.tool_calls for s in stats)
    metrics = {
        "multi_turn/assistant_turns/mean": sum(turns) / len(turns),
        "multi_turn/assistant_turns/max": float(max(turns)),
        **{f"multi_turn/finish/{reason}": finishes.count(reason) / len(finishes)
           for reason in ("answer", "max_turns", "max_tokens")},
        "tool/calls_per_sample": calls / len(stats),
        "tool/errors": float(sum(s.tool_errors for s in stats)),
        "tool/timeouts": float(sum(s.tool_timeouts for s in stats)),
        "tool/latency_s": sum(s.tool_seconds for s in stats) / calls if calls else 0.0,
        "timing_s/tools": max(s.engine_tool_wall_s for s in stats),
    }
    return metrics


def varied_ratio(scores: torch.Tensor, uids: list) -> float:
    """The fraction of prompts (a `uid` each) whose responses did not all score the same: the groups an advantage
    estimator can learn from (health.py's zero_advantages check reads it)."""
    groups: dict = {}
    for uid, value in zip(uids, scores.tolist()):
        groups.setdefault(uid, set()).add(value)
    return sum(len(values) > 1 for values in groups.values()) / max(len(groups), 1)
