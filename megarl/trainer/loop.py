"""The RL loop, written once against the controller (it runs the same under Ray and under torchrun).

One step: generate `rollout.n` responses per prompt → score → old log-probs (and the engine/trainer log-prob
gate) → reference log-probs → values → rewards (KL penalty) → advantages → critic update → actor update →
weight sync → a checkpoint every `trainer.save_freq` steps (megarl/trainer/checkpoint.py, which also resumes);
validation before the first step, every `trainer.test_freq` steps and after the last.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

from transformers import AutoTokenizer

from megarl.algorithms import make_kl_controller
from megarl.config.schema import MegaRLConfig
from megarl.data.dataset import PromptLoader, RLDataset
from megarl.models.bridge import load_hf_config
from megarl.placement import role_pools, start_workers
from megarl.rewards.function import load_reward_function
from megarl.rewards.scorer import RewardScorer
from megarl.rollout.batch import prompt_batch
from megarl.rollout.gates import check_logprob_agreement, logprob_agreement
from megarl.trainer.checkpoint import Checkpointer, find_resume_checkpoint
from megarl.trainer.metrics import MetricsLogger, check_loggers
from megarl.trainer.perf import perf_metrics, summarise
from megarl.trainer.stages import advantages, data_metrics, rewards, score
from megarl.trainer.validation import Validator
from megarl.workers.actor import ActorWorker
from megarl.workers.critic import CriticWorker
from megarl.workers.reference import ReferenceWorker
from megarl.workers.rollout import RolloutWorker
from parallel.batch import Batch


@contextmanager
def timed(metrics: dict, name: str):
    start = time.perf_counter()
    yield
    metrics[f"timing_s/{name}"] = time.perf_counter() - start


def total_steps(cfg: MegaRLConfig, loader: PromptLoader) -> int:
    return cfg.trainer.total_training_steps or len(loader) * cfg.trainer.total_epochs


def train(cfg: MegaRLConfig) -> None:
    check_loggers(cfg)
    resume_from = find_resume_checkpoint(cfg)  # before anything starts: a wrong resume path fails at once
    hf_config = load_hf_config(cfg.model.path)
    tokenizer = AutoTokenizer.from_pretrained(cfg.model.tokenizer_path or cfg.model.path,
                                              trust_remote_code=cfg.model.trust_remote_code)
    dataset = RLDataset(cfg.data.train_files, tokenizer, max_prompt_length=cfg.data.max_prompt_length,
                        prompt_key=cfg.data.prompt_key, filter_overlong_prompts=cfg.data.filter_overlong_prompts,
                        truncation=cfg.data.truncation)
    loader = PromptLoader(dataset, cfg.data.train_batch_size, shuffle=cfg.data.shuffle, seed=cfg.trainer.seed)
    steps = total_steps(cfg, loader)
    scorer = RewardScorer(tokenizer, load_reward_function(cfg.reward.function), cfg.reward.kwargs)
    kl = cfg.algorithm.kl_ctrl
    kl_controller = make_kl_controller(kl.type, kl.kl_coef, kl.target_kl, kl.horizon)
    validate = Validator(cfg, tokenizer, scorer) if cfg.data.val_files else None
    test_freq = cfg.trainer.test_freq
    pools = role_pools(cfg)
    with start_workers(cfg) as cluster:
        actor = cluster[pools["actor"]].spawn("actor", ActorWorker, cfg, steps)
        reference = (cluster[pools["reference"]].spawn("reference", ReferenceWorker, cfg)
                     if cfg.use_reference else None)
        critic = cluster[pools["critic"]].spawn("critic", CriticWorker, cfg, steps) if cfg.use_critic else None
        rollout = cluster[pools["rollout"]].spawn("rollout", RolloutWorker, cfg)
        checkpoints = Checkpointer(cfg, cluster.is_driver, {"actor": actor, "critic": critic},
                                   {"loader": loader, "kl_controller": kl_controller})
        start = checkpoints.load(resume_from)
        with MetricsLogger(cfg, steps, cluster.is_driver, start_step=start) as logger:
            rollout.sync_weights()  # after the load: the engine serves the restored actor
            if validate and cfg.trainer.val_before_train and start == 0:
                logger.log(0, validate(rollout))
            data = iter(_forever(loader))
            for step in range(start + 1, steps + 1):
                metrics: dict[str, float] = {}
                with timed(metrics, "step"):
                    prompts = prompt_batch(next(data), first_uid=step * cfg.data.train_batch_size)
                    with timed(metrics, "gen"):
                        batch = rollout.generate(prompts, seed=cfg.trainer.seed + step)
                    if cfg.algorithm.adv_estimator == "remax":  # the greedy response's score is the baseline
                        with timed(metrics, "gen_max"):
                            greedy, _ = score(rollout.generate(prompts, greedy=True), scorer)
                            baseline = greedy["token_level_scores"].sum(-1).repeat_interleave(cfg.rollout.n)
                            batch = batch.union(Batch({"reward_baselines": baseline}))
                    rollout.release()
                    with timed(metrics, "reward"):
                        scored, reward_metrics = score(batch, scorer)
                        batch = batch.union(scored)
                    with timed(metrics, "old_log_prob"):
                        batch = batch.union(actor.compute_log_prob(batch))
                    gate = logprob_agreement(batch["rollout_log_probs"], batch["old_log_probs"], batch["response_mask"])
                    if cfg.rollout.max_logprob_mult_error is not None:
                        check_logprob_agreement(gate, cfg.rollout.max_logprob_mult_error)
                    if reference is not None:
                        with timed(metrics, "ref"):
                            batch = batch.union(reference.compute_ref_log_prob(batch))
                    if critic is not None:
                        with timed(metrics, "values"):
                            batch = batch.union(critic.compute_values(batch))
                    with timed(metrics, "adv"):
                        rewarded, kl_metrics = rewards(batch, cfg.algorithm, kl_controller)
                        batch = batch.union(rewarded)
                        batch = batch.union(advantages(batch, cfg.algorithm))
                    if critic is not None:
                        with timed(metrics, "update_critic"):
                            metrics.update(critic.update_critic(batch)[0])
                    if step > cfg.trainer.critic_warmup:
                        with timed(metrics, "update_actor"):
                            metrics.update(actor.update_actor(batch)[0])
                    with timed(metrics, "update_weights"):
                        metrics.update(rollout.sync_weights())
                if validate and (step == steps or test_freq > 0 and step % test_freq == 0):
                    with timed(metrics, "testing"):
                        metrics.update(validate(rollout))
                metrics.update(reward_metrics, **kl_metrics, **gate,
                               **data_metrics(batch, cfg.data.max_response_length))
                metrics.update(perf_metrics(batch, metrics, cfg.world_size, hf_config, cfg.actor.ppo_epochs,
                                            summarise(actor.device_stats())))
                logger.log(step, metrics)
                checkpoints.maybe_save(step, steps)


def _forever(loader: PromptLoader):
    while True:
        yield from loader
