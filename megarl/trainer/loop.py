"""The RL loop, written once against the controller (it runs the same under Ray and under torchrun).

`train` sets a run up and steps it: validation before the first step, every `trainer.test_freq` steps and after the
last; a checkpoint every `trainer.save_freq` steps (megarl/trainer/checkpoint.py, which also resumes). `RLStep` is
one step as a timeline of role calls: generate → score (rules, a reward model, a judge; rounds of both with dynamic
sampling: sampling.py) → old log-probs (and the engine/trainer log-prob gate) → reference log-probs → values →
rewards (KL penalty) → advantages → critic update → actor update → weight sync.
The tensor work runs in the workers (megarl/workers); what the driver does between their calls is in stages.py.
"""

from __future__ import annotations

from functools import partial
from typing import Iterator

from megarl.agent.tools import tool_schemas
from megarl.algorithms import make_kl_controller
from megarl.algorithms.kl import FixedKLController
from megarl.config.schema import MegaRLConfig
from megarl.data.dataset import PromptLoader, RLDataset
from megarl.models.bridge import load_hf_config
from megarl.models.tokenizer import load_tokenizer
from megarl.placement import start_workers
from megarl.rewards.scorer import RewardScorer
from megarl.trainer import stages
from megarl.trainer.ahead import AheadSampler
from megarl.trainer.checkpoint import Checkpointer, find_resume_checkpoint, saved_step
from megarl.trainer.health import HealthMonitor, HealthStop
from megarl.trainer.metrics import MetricsLogger, check_loggers
from megarl.trainer.perf import memory_metrics, perf_metrics, summarise
from megarl.trainer.phases import timed
from megarl.trainer.profiling import StepProfiler
from megarl.trainer.ptx import pretraining_columns, pretraining_loader
from megarl.trainer.roles import Roles, Rollout
from megarl.trainer.spawn import spawn_roles
from megarl.trainer.samples import SampleLog
from megarl.trainer.sampling import Sampler, StepSampler
from megarl.trainer.scaffold import endless, tell, total_steps, validates_at
from megarl.trainer.stages import Score
from megarl.trainer.validation import Validator
from megarl.workers.inputs import model_path, reward_output_log
from parallel.batch import Batch
from parallel.memory import Windows
from parallel.worker import Worker


def make_sampler(roles: Roles, cfg: MegaRLConfig, score: Score, loader: PromptLoader, steps: int) -> Sampler:
    """The step's samples, generated in the step or (trainer.staleness) steps ahead of it, up to step `steps`."""
    sampler = StepSampler(roles.rollout, cfg, score, roles.reward_model, roles.judge)
    staleness = cfg.trainer.staleness
    return AheadSampler(sampler, roles.rollout, loader, staleness, steps) if staleness else sampler


class RLStep:
    """One PPO/GRPO-family step over a batch of prompts."""

    def __init__(self, roles: Roles, cfg: MegaRLConfig, sample: Sampler, kl_controller: FixedKLController,
                 pretraining: Iterator[dict] | None = None):
        """`sample`: make_sampler's."""
        self.roles, self.sample, self.kl_controller, self.pretraining = roles, sample, kl_controller, pretraining
        self.algorithm = cfg.algorithm
        self.max_logprob_mult_error = cfg.rollout.max_logprob_mult_error
        self.engine_log_probs = cfg.rollout.calculate_log_probs
        self.critic_warmup = cfg.trainer.critic_warmup
        self.windows: Windows = {}  # the last step's phases (wall clock), for its timeline

    def __call__(self, step: int, prompts: Iterator[dict]) -> tuple[Batch, dict[str, float]]:
        """One step on prompts drawn from `prompts` (one loader batch, or more with dynamic sampling)."""
        roles = self.roles
        metrics: dict[str, float] = {}
        windows: Windows = {}
        self.windows = windows
        phase = partial(timed, metrics, windows=windows)
        batch, reward_metrics = self.sample(step, prompts, phase)  # gen, gen_max and reward
        roles.weights.release(phase)
        with phase("old_log_prob"):
            batch = batch.union(roles.actor.compute_log_prob(batch))
        gate = stages.logprob_gate(batch, self.max_logprob_mult_error) if self.engine_log_probs else {}
        if self.algorithm.rollout_correction.enabled:
            corrected, correction_metrics = stages.correct_rollout(batch, self.algorithm.rollout_correction)
            batch, gate = batch.union(corrected), {**gate, **correction_metrics}
        if roles.reference is not None:
            with phase("ref"):
                batch = batch.union(roles.reference.compute_ref_log_prob(batch))
        if roles.critic is not None:
            with phase("values"):
                batch = batch.union(roles.critic.compute_values(batch))
        with phase("adv"):
            rewarded, kl_metrics = stages.rewards(batch, self.algorithm, self.kl_controller)
            batch = batch.union(rewarded)
            batch = batch.union(stages.advantages(batch, self.algorithm))
        if roles.critic is not None:
            with phase("update_critic"):
                metrics.update(roles.critic.update_critic(batch))
        if step > self.critic_warmup:
            with phase("update_actor"):
                update = batch
                if self.pretraining is not None:  # PPO-ptx
                    update = batch.union(pretraining_columns(next(self.pretraining), len(batch)))
                metrics.update(roles.actor.update_actor(update))
        metrics.update(roles.weights.sync(phase))
        metrics["rollout/engine_restarts"] = roles.rollout.restarts
        return batch, {**metrics, **reward_metrics, **kl_metrics, **gate, **self.memory(windows)}

    def memory(self, windows: Windows) -> dict[str, float]:
        """`memory/*/peak_gb` of the step's phases, asked of every process of the actor's pool (and of the critic's
        and the reward model's, when they have their own) with the step's span as the "step" window."""
        step = (min(start for start, _ in windows.values()), max(end for _, end in windows.values()))
        windows = {**windows, "step": step}
        return memory_metrics([rank for pool in self.roles.model_pools
                               for rank in pool.call(Worker.memory_peaks, windows)])


def validation(validator: Validator, rollout: Rollout, score: Score, samples: SampleLog,
               step: int) -> dict[str, float]:
    """Validate the engines' current weights; the first samples go to the sample logs."""
    metrics, kept = validator(rollout, score)
    samples.log_validation(step, kept)
    return metrics


def stop_for_health(checkpoints: Checkpointer, step: int, saved: bool, reason: str) -> None:
    """End the run on a stop_on breach, its step checkpointed."""
    if not saved:
        checkpoints.save(step)
    raise HealthStop(f"stopped after step {step}: {reason}; the step's checkpoint is in "
                     f"{checkpoints.root} (trainer.resume_mode=auto resumes from it)")


def train(cfg: MegaRLConfig) -> None:
    check_loggers(cfg)
    resume_from = find_resume_checkpoint(cfg)  # before anything starts: a wrong resume path fails at once
    hf_config = load_hf_config(model_path(cfg.model.path, "model.path"))
    tokenizer = load_tokenizer(cfg.model)
    data = cfg.data
    tools = tool_schemas(cfg.rollout.multi_turn)
    loader = PromptLoader(RLDataset.from_config(data.train_files, tokenizer, data, tools), data.generation_batch_size,
                          shuffle=data.shuffle, seed=cfg.trainer.seed)
    steps = total_steps(cfg.trainer, len(loader))
    done = saved_step(resume_from) if resume_from is not None else None
    if done is not None and done >= steps:
        tell(f"{cfg.trainer.output_dir} is already at step {done} of {steps}: nothing to train "
             "(raise trainer.total_training_steps or trainer.total_epochs to go on)")
        return
    ptx = pretraining_loader(cfg, tokenizer)
    scorer = RewardScorer.from_config(tokenizer, cfg.reward, reward_output_log(cfg))
    kl = cfg.algorithm.kl_ctrl
    kl_controller = make_kl_controller(kl.type, kl.kl_coef, kl.target_kl, kl.horizon)
    validator = (Validator(data, cfg.rollout.val_kwargs.n, tokenizer, cfg.trainer.log_samples, tools)
                 if data.val_files else None)
    with scorer, start_workers(cfg) as cluster:  # the scorer's worker processes end with the run
        score = partial(cluster.once, scorer)  # each batch scored once: torchrun's ranks share rank 0's scores
        roles = spawn_roles(cluster, cfg, steps)
        sample = make_sampler(roles, cfg, score, loader, steps)
        # Generating ahead, the loader's state to save is the one before the prompts in flight.
        loader_state = sample if cfg.trainer.staleness else loader
        state = {"loader": loader_state, "kl_controller": kl_controller, **({"ptx_loader": ptx} if ptx else {})}
        checkpoints = Checkpointer(cfg, cluster.is_driver, {"actor": roles.actor, "critic": roles.critic}, state)
        start = checkpoints.load(resume_from)
        rl_step = RLStep(roles, cfg, sample, kl_controller, endless(ptx) if ptx else None)
        health = HealthMonitor(cfg.trainer.health, tell)
        samples = SampleLog(cfg.trainer, cfg.reward, tokenizer, cluster.is_driver, start)
        profile = StepProfiler(cfg.trainer, roles.trained_pools, cluster.is_driver, roles.rollout)
        validate = partial(validation, validator, roles.rollout, score, samples) if validator else None
        with MetricsLogger(cfg, steps, cluster.is_driver, start_step=start) as logger:
            roles.weights.sync()  # after the load: the engine serves the restored actor
            if validate and cfg.trainer.val_before_train and start == 0:
                logger.log(0, validate(0))
            batches = endless(loader)
            for step in range(start + 1, steps + 1):
                metrics: dict[str, float] = {}
                with timed(metrics, "step"), profile(step):
                    batch, step_metrics = rl_step(step, batches)
                profile.write_timeline(step, rl_step.windows)
                metrics.update(step_metrics)
                if validate and validates_at(step, steps, cfg.trainer.test_freq):
                    with timed(metrics, "testing"):
                        metrics.update(validate(step))
                metrics.update(stages.data_metrics(batch, data.max_response_length))
                metrics.update(perf_metrics(batch, metrics, cfg.gpus, cfg.world_size, hf_config, cfg.actor.ppo_epochs,
                                            summarise(roles.actor.device_stats()), cfg.actor.lora.rank > 0))
                metrics.update(health(step, metrics))
                logger.log(step, metrics)
                samples.log_step(step, batch, metrics)
                saved = checkpoints.maybe_save(step, steps)
                if health.stop_reason is not None:
                    stop_for_health(checkpoints, step, saved, health.stop_reason)
