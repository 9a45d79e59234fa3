"""The numeric ranges of a recipe's values (learning rates, Adam's betas, clip ratios, sampling settings, ...): each
value outside its range, or not a finite number, is one problem naming its key, found when the recipe loads, before
any worker starts. A NaN compares false with everything, so each rule is written as what a valid value satisfies."""

from __future__ import annotations

import math
from typing import Callable

from megarl.config.schema import MegaRLConfig, OptimConfig, RolloutConfig, ValSamplingConfig

RULES: dict[str, Callable[[float], bool]] = {
    "> 0": lambda v: v > 0,
    "> 1": lambda v: v > 1,
    "≥ 0": lambda v: v >= 0,
    "in [0, 1)": lambda v: 0 <= v < 1,
    "in [0, 1]": lambda v: 0 <= v <= 1,
    "in (0, 1]": lambda v: 0 < v <= 1,
    "a finite number": lambda v: True,
}


def check_number(problems: list[str], key: str, value: float, rule: str, note: str = "") -> None:
    """`key`'s `value` against one of RULES (e.g. "in [0, 1)"); `note` follows the rule in the message."""
    if not math.isfinite(value):
        problems.append(f"{key}={value} must be a finite number")
    elif not RULES[rule](value):
        problems.append(f"{key}={value} must be {rule}{note}")


def check_optim(problems: list[str], key: str, optim: OptimConfig) -> None:
    """An optimizer section (`actor.optim`, `critic.optim`, or `optim` of SFT and reward-model recipes)."""
    check_number(problems, f"{key}.lr", optim.lr, "> 0")
    lr_valid = math.isfinite(optim.lr) and optim.lr > 0
    if lr_valid and not 0 <= optim.min_lr <= optim.lr:  # also refuses NaN
        problems.append(f"{key}.min_lr={optim.min_lr} must be in [0, {key}.lr={optim.lr}] (where the LR decays to)")
    check_number(problems, f"{key}.weight_decay", optim.weight_decay, "≥ 0")
    check_number(problems, f"{key}.clip_grad", optim.clip_grad, "≥ 0", " (0: no clipping)")
    if optim.lr_warmup_steps < 0:
        problems.append(f"{key}.lr_warmup_steps={optim.lr_warmup_steps} must be ≥ 0")
    if len(optim.betas) != 2:
        problems.append(f"{key}.betas={optim.betas} must be two numbers, e.g. [0.9, 0.999]")
    for i, beta in enumerate(optim.betas):
        check_number(problems, f"{key}.betas[{i}]", beta, "in [0, 1)")


def check_numeric_ranges(cfg: MegaRLConfig, problems: list[str]) -> None:
    """An RL recipe's ranges: the trained roles' optimizers, the losses' coefficients and clip bounds, the
    advantage estimator's discounts, the sampling settings and the reward weights."""
    actor = cfg.actor
    check_optim(problems, "actor.optim", actor.optim)
    check_number(problems, "actor.clip_ratio_low", actor.clip_ratio_low, "in [0, 1)")
    check_number(problems, "actor.clip_ratio_high", actor.clip_ratio_high, "≥ 0")
    check_number(problems, "actor.clip_ratio_c", actor.clip_ratio_c, "> 1", " (the dual-clip bound)")
    check_number(problems, "actor.kl_loss_coef", actor.kl_loss_coef, "≥ 0")
    check_number(problems, "actor.entropy_coeff", actor.entropy_coeff, "a finite number")
    if cfg.use_critic:
        check_optim(problems, "critic.optim", cfg.critic.optim)
        check_number(problems, "critic.cliprange_value", cfg.critic.cliprange_value, "> 0")
    algorithm = cfg.algorithm
    check_number(problems, "algorithm.gamma", algorithm.gamma, "in [0, 1]")
    check_number(problems, "algorithm.lam", algorithm.lam, "in [0, 1]")
    check_number(problems, "algorithm.kl_ctrl.kl_coef", algorithm.kl_ctrl.kl_coef, "≥ 0")
    _check_sampling(problems, "rollout", cfg.rollout)
    _check_sampling(problems, "rollout.val_kwargs", cfg.rollout.val_kwargs)
    check_number(problems, "reward.rule_weight", cfg.reward.rule_weight, "a finite number")
    check_number(problems, "reward.model.weight", cfg.reward.model.weight, "a finite number")
    sandbox = cfg.reward.sandbox
    for name in ("workers", "wall_s", "cpu_s", "memory_mb", "processes", "output_bytes"):
        check_number(problems, f"reward.sandbox.{name}", getattr(sandbox, name), "> 0")
    multi_turn = cfg.rollout.multi_turn
    for name in ("max_assistant_turns", "max_tool_response_length", "tool_timeout_s"):
        check_number(problems, f"rollout.multi_turn.{name}", getattr(multi_turn, name), "> 0")
    if multi_turn.max_total_tokens is not None:
        check_number(problems, "rollout.multi_turn.max_total_tokens", multi_turn.max_total_tokens, "> 0")


def _check_sampling(problems: list[str], key: str, sampling: RolloutConfig | ValSamplingConfig) -> None:
    """The sampling settings the rollout section and its val_kwargs share."""
    check_number(problems, f"{key}.temperature", sampling.temperature, "≥ 0", " (0: greedy)")
    check_number(problems, f"{key}.top_p", sampling.top_p, "in (0, 1]")
    if sampling.top_k != -1 and sampling.top_k < 1:
        problems.append(f"{key}.top_k={sampling.top_k} must be -1 (off) or ≥ 1")


def divisors(n: int) -> str:
    """The divisors of `n`, listed for an error message's "use one of"."""
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)
