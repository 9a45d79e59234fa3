"""Where the rollout engines run, checked against the recipe: beside the actor on its GPUs (each GPU's engine rank
built from whole training shards), or on a pool of their own (`rollout.enable_resource_pool`), where
`trainer.staleness` lets generation run ahead of training; and what reads the engine's log-probs, against
`rollout.calculate_log_probs`."""

from __future__ import annotations

from megarl.config.schema import MegaRLConfig


def check_rollout_placement(cfg: MegaRLConfig, problems: list[str]) -> None:
    rollout = cfg.rollout
    if rollout.enable_resource_pool:
        _check_own_pool(cfg, problems)
    else:
        _check_colocated(cfg, problems)
    if cfg.trainer.staleness < 0:
        problems.append(f"trainer.staleness={cfg.trainer.staleness} must be 0 or more")
    elif cfg.trainer.staleness > 0:
        if not rollout.enable_resource_pool:
            problems.append(f"trainer.staleness={cfg.trainer.staleness} needs rollout.enable_resource_pool=true: "
                            "engines that share the trainer's GPUs cannot generate while it trains")
        if cfg.algorithm.filter_groups.enable:
            problems.append("trainer.staleness > 0 cannot run DAPO's dynamic sampling (algorithm.filter_groups): "
                            "how many rounds a step needs is known only once its batch is scored")
        if rollout.max_logprob_mult_error is not None:
            problems.append("rollout.max_logprob_mult_error cannot gate a run with trainer.staleness > 0: the engines' "
                            "log-probs are an older policy's, not a check of the weight sync; drop it (null)")
        if "logprob_mismatch" in cfg.trainer.health.stop_on:
            problems.append("trainer.health.stop_on cannot name logprob_mismatch with trainer.staleness > 0: the "
                            "engines' log-probs are an older policy's, so the check is off at stale steps; drop it")
        if cfg.algorithm.adv_estimator == "remax":
            problems.append("trainer.staleness > 0 cannot run ReMax: its greedy baseline is generated within the step")


def _check_colocated(cfg: MegaRLConfig, problems: list[str]) -> None:
    rollout_tp, train_tp = cfg.rollout.tensor_model_parallel_size, cfg.actor.megatron.tensor_model_parallel_size
    if rollout_tp >= 1 and train_tp >= 1 and max(rollout_tp, train_tp) % min(rollout_tp, train_tp):
        problems.append(
            f"rollout.tensor_model_parallel_size={rollout_tp} and actor.megatron.tensor_model_parallel_size="
            f"{train_tp} must divide one another (each GPU's engine rank is built from whole training shards)"
        )
    if rollout_tp >= 1 and cfg.trainer.n_gpus_per_node % rollout_tp:
        problems.append(
            f"rollout.tensor_model_parallel_size={rollout_tp} must divide trainer.n_gpus_per_node="
            f"{cfg.trainer.n_gpus_per_node} (an engine's GPUs are on one node)"
        )


def _check_own_pool(cfg: MegaRLConfig, problems: list[str]) -> None:
    """Its sizes and launcher are checked with the other roles' pools (validate.py)."""
    rollout = cfg.rollout
    if rollout.tensor_model_parallel_size >= 1 and rollout.n_gpus_per_node % rollout.tensor_model_parallel_size:
        problems.append(f"rollout.tensor_model_parallel_size={rollout.tensor_model_parallel_size} must divide "
                        f"rollout.n_gpus_per_node={rollout.n_gpus_per_node} (an engine's GPUs are on one node)")


def check_engine_log_probs(cfg: MegaRLConfig, problems: list[str]) -> None:
    """Without the engine's log-probs nothing may read them."""
    if cfg.rollout.calculate_log_probs:
        return
    readers = []
    if cfg.rollout.max_logprob_mult_error is not None:
        readers.append("rollout.max_logprob_mult_error (drop it: null)")
    if cfg.algorithm.rollout_correction.enabled:
        readers.append("algorithm.rollout_correction (drop rollout_is, rollout_rs and rollout_token_veto_threshold)")
    if "logprob_mismatch" in cfg.trainer.health.stop_on:
        readers.append("trainer.health.stop_on's logprob_mismatch (drop it)")
    if readers:
        problems.append("rollout.calculate_log_probs=false leaves the engine's log-probs out, but "
                        f"{', '.join(readers)} reads them: set rollout.calculate_log_probs=true or change those")
