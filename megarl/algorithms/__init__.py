"""RL algorithms as pure torch functions: advantages, KL, losses, loss aggregation, the reward model's ranking loss.

Names and semantics follow verl's core_algos so ported code reads the same; recipes name estimators,
policy losses and KL estimators through the registries here.
"""

from megarl.algorithms.advantages import (
    ADV_ESTIMATORS,
    compute_advantage,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    register_adv_est,
)
from megarl.algorithms.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    kl_penalty,
    make_kl_controller,
)
from megarl.algorithms.losses import (
    LOSS_AGG_MODES,
    POLICY_LOSSES,
    agg_loss,
    compute_policy_loss,
    compute_value_loss,
    entropy_from_logits,
    register_policy_loss,
    token_weights,
)
from megarl.algorithms.masked import masked_mean, masked_sum, masked_var, masked_whiten
from megarl.algorithms.ranking import RankingTerms, ranking_loss, ranking_terms

__all__ = [
    "ADV_ESTIMATORS",
    "KL_ESTIMATORS",
    "LOSS_AGG_MODES",
    "POLICY_LOSSES",
    "AdaptiveKLController",
    "FixedKLController",
    "RankingTerms",
    "agg_loss",
    "apply_kl_penalty",
    "compute_advantage",
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_policy_loss",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_value_loss",
    "entropy_from_logits",
    "kl_penalty",
    "make_kl_controller",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "ranking_loss",
    "ranking_terms",
    "register_adv_est",
    "register_policy_loss",
    "token_weights",
]
