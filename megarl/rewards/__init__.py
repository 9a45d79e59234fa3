"""Rewards: rule scorers by data_source, user reward functions, and the batch scorer."""

from megarl.rewards.function import RewardFunctionSpecError, load_reward_function
from megarl.rewards.registry import RULE_SCORERS, default_compute_score, register_data_source
from megarl.rewards.scorer import RewardFunctionError, RewardResult, RewardScorer

__all__ = [
    "RULE_SCORERS",
    "RewardFunctionError",
    "RewardFunctionSpecError",
    "RewardResult",
    "RewardScorer",
    "default_compute_score",
    "load_reward_function",
    "register_data_source",
]
