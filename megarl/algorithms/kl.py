"""KL estimators between the policy and the reference, and the controllers of the KL reward coefficient."""

from __future__ import annotations

import numpy as np
import torch

from megarl.algorithms.masked import masked_mean
from megarl.registry import Registry

KL_ESTIMATORS: Registry = Registry("KL estimator")


@KL_ESTIMATORS.register("kl", "k1")
def _kl_k1(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    return logprob - ref_logprob


@KL_ESTIMATORS.register("abs")
def _kl_abs(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    return (logprob - ref_logprob).abs()


@KL_ESTIMATORS.register("mse", "k2")
def _kl_k2(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    return 0.5 * (logprob - ref_logprob).square()


@KL_ESTIMATORS.register("low_var_kl", "k3")
def _kl_k3(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    # Schulman's unbiased, non-negative estimator; clamped as in verl so a rare token cannot explode it.
    log_ratio = torch.clamp(ref_logprob - logprob, min=-20, max=20)
    kld = torch.exp(log_ratio) - log_ratio - 1
    return torch.clamp(kld, min=-10, max=10)


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate: kl/k1, abs, mse/k2 or low_var_kl/k3."""
    return KL_ESTIMATORS.get(kl_penalty)(logprob, ref_logprob)


class FixedKLController:
    """A constant KL coefficient."""

    def __init__(self, kl_coef: float):
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        pass

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]


class AdaptiveKLController(FixedKLController):
    """Adaptive coefficient of Ziegler et al. (2019): steer the measured KL towards `target_kl`."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        super().__init__(init_kl_coef)
        self.target = target_kl
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = np.clip(current_kl / self.target - 1, -0.2, 0.2)
        self.value *= 1 + proportional_error * n_steps / self.horizon


def make_kl_controller(type: str, kl_coef: float, target_kl: float, horizon: int) -> FixedKLController:
    if type == "fixed":
        return FixedKLController(kl_coef)
    if type == "adaptive":
        return AdaptiveKLController(kl_coef, target_kl, horizon)
    raise ValueError(f"unknown KL controller type {type!r}; known: adaptive, fixed")


def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_coef: float,
    kl_penalty_type: str = "kl",
) -> tuple[torch.Tensor, float]:
    """KL in the reward: rewards = scores − β·KL per token. Returns the rewards and the batch's mean
    per-sequence KL, which the caller feeds to its controller's `update` (verl's apply_kl_penalty)."""
    kld = kl_penalty(old_log_prob, ref_log_prob, kl_penalty_type) * response_mask
    token_level_rewards = token_level_scores - kl_coef * kld
    current_kl = masked_mean(kld, response_mask, axis=-1).mean().item()
    return token_level_rewards, current_kl
