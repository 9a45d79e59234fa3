"""Training health after each step: practitioners' warning signs (seed 001) as `health/<check>` metrics, 1 on a
breach, each breach with one console line naming what to do. A check named in `trainer.health.stop_on` ends the
run after its step is logged and checkpointed (`HealthStop`).

Checks read the step's metrics, so every torchrun rank (which logs the same metrics) decides alike; a check whose
metric the step lacks (no validation this step, a critic-only step) is not evaluated.
"""

from __future__ import annotations

from typing import Callable, Optional

from megarl.config.schema import HealthConfig

VALIDATION = "val-core/"
# Scores beyond it are no reward scale anyone means (float32 squares overflow above ~1.8e19): named as the cause.
HUGE_SCORE = 1e15
# Each check by name: the metric (prefix) it reads, evaluated only on steps that have it, and its judgement.
Judge = Callable[["HealthMonitor", int, dict], Optional[str]]
CHECKS: dict[str, tuple[str, Judge]] = {}


def check(name: str, reads: str) -> Callable[[Judge], Judge]:
    def register(judge: Judge) -> Judge:
        CHECKS[name] = (reads, judge)
        return judge

    return register


class HealthStop(Exception):
    """A breach of a check named in trainer.health.stop_on ended the run."""


class HealthMonitor:
    """Runs the checks of `health` on each step's metrics and remembers what they compare against (step 1's
    entropy, the best validation)."""

    def __init__(self, health: HealthConfig, speak: Callable[[str], None]):
        self.health, self.speak = health, speak
        self.first_entropy: float | None = None
        self.best_validation: tuple[float, int] | None = None  # (score, step)
        self.validations_since_best = 0
        self.stop_reason: str | None = None  # set by a breach of a stop_on check

    def __call__(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        """`health/<check>` of each check the step's metrics allow; each breach said in one line."""
        if not self.health.enable:
            return {}
        out = {}
        for name, (reads, judge) in CHECKS.items():
            if not any(k.startswith(reads) for k in metrics):
                continue
            message = judge(self, step, metrics)
            out[f"health/{name}"] = float(message is not None)
            if message is not None:
                self.speak(f"health ({name}) at step {step}: {message}")
                if name in self.health.stop_on and self.stop_reason is None:
                    self.stop_reason = f"trainer.health.stop_on has {name}: {message}"
        return out

    @check("ppo_kl", reads="actor/ppo_kl")
    def _ppo_kl(self, step: int, metrics: dict) -> str | None:
        kl = metrics.get("actor/ppo_kl")
        if kl is None:
            return None
        if kl > self.health.ppo_kl_max:
            return (f"actor/ppo_kl={kl:.3g} > {self.health.ppo_kl_max}: each update moves the policy far from the one "
                    "that sampled: lower actor.optim.lr, or raise the KL coefficient (actor.kl_loss_coef)")
        if self.health.ppo_kl_min is not None and kl < self.health.ppo_kl_min:
            return (f"actor/ppo_kl={kl:.3g} < {self.health.ppo_kl_min}: updates barely move the policy: raise "
                    "actor.optim.lr or lower the KL coefficient")
        return None

    @check("grad_norm", reads="actor/grad_norm")
    def _grad_norm(self, step: int, metrics: dict) -> str | None:
        norm = metrics.get("actor/grad_norm")
        if norm is None or norm <= self.health.grad_norm_max:  # NaN breaches too
            return None
        return (f"actor/grad_norm={norm:.3g} > {self.health.grad_norm_max}: lower actor.optim.lr or "
                "actor.optim.clip_grad (above 100 training usually diverges)")

    @check("entropy_collapse", reads="actor/entropy")
    def _entropy_collapse(self, step: int, metrics: dict) -> str | None:
        entropy = metrics.get("actor/entropy")
        if entropy is None:
            return None
        if self.first_entropy is None:
            self.first_entropy = entropy
        floor = self.health.entropy_collapse_ratio * self.first_entropy
        if entropy >= floor:
            return None
        return (f"actor/entropy={entropy:.3g} fell below {self.health.entropy_collapse_ratio:g} × its first value "
                f"{self.first_entropy:.3g}: the policy is collapsing onto few answers: raise actor.entropy_coeff or "
                "rollout.temperature, or use clip-higher (actor.clip_ratio_high)")

    @check("response_clipping", reads="response_length/clip_ratio")
    def _response_clipping(self, step: int, metrics: dict) -> str | None:
        clipped = metrics.get("response_length/clip_ratio")
        if clipped is None or clipped <= self.health.response_clip_ratio_max:
            return None
        return (f"{clipped:.0%} of responses hit data.max_response_length: raise it, or penalise overlong answers "
                "(reward.overlong_buffer)")

    @check("logprob_mismatch", reads="rollout/logprob_mult_error")
    def _logprob_mismatch(self, step: int, metrics: dict) -> str | None:
        error = metrics.get("rollout/logprob_mult_error")
        # Generated ahead (trainer.staleness), the engines' log-probs are an older policy's: the error then measures
        # how far the policy moved since, which rollout correction weighs, not a disagreement over the same weights.
        stale = metrics.get("rollout_corr/staleness", 0.0) > 0
        if error is None or stale or error <= self.health.logprob_mult_error_max:
            return None
        return (f"rollout/logprob_mult_error={error:.4g} > {self.health.logprob_mult_error_max}: the engine and the "
                "trainer disagree on the sampled tokens' log-probs: correct for it (algorithm.rollout_correction) "
                "or find the mismatch (rollout settings, precision)")

    @check("zero_advantages", reads="critic/score/varied_ratio")
    def _zero_advantages(self, step: int, metrics: dict) -> str | None:
        varied = metrics.get("critic/score/varied_ratio")
        extremes = metrics.get("critic/advantages/max"), metrics.get("critic/advantages/min")
        if not varied or extremes != (0.0, 0.0):
            return None
        low, high = metrics["critic/score/min"], metrics["critic/score/max"]
        if max(abs(low), abs(high)) > HUGE_SCORE:
            cause = ("scores this large lose their differences in the advantage statistics; scale the reward down "
                     "(to about [-10, 10])")
        else:
            cause = "algorithm.adv_estimator turned differing scores into no signal: check the estimator"
        return (f"every advantage is 0 although the responses of {varied:.0%} of the prompts scored differently "
                f"(critic/score in [{low:.3g}, {high:.3g}]), so the step trained nothing: {cause}")

    @check("val_stall", reads=VALIDATION)
    def _val_stall(self, step: int, metrics: dict) -> str | None:
        scores = [value for key, value in metrics.items() if key.startswith(VALIDATION)]
        if not scores:
            return None
        score = sum(scores) / len(scores)
        if self.best_validation is None or score > self.best_validation[0]:
            self.best_validation, self.validations_since_best = (score, step), 0
            return None
        self.validations_since_best += 1
        if self.validations_since_best < self.health.val_patience:
            return None
        best, at = self.best_validation
        return (f"validation has not improved for {self.validations_since_best} evaluations (best {best:.4g} at step "
                f"{at}): consider stopping, or lowering actor.optim.lr")
