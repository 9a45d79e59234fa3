"""Rollout: the engine interface (`base`), its backends (`ROLLOUT_BACKENDS`: transformers; sglang on GPUs) and
the train/rollout log-prob agreement gate (`gates`)."""

from megarl.rollout.base import MEMORY_TAGS, ROLLOUT_BACKENDS, Response, RolloutEngine, SamplingParams
from megarl.rollout.gates import logprob_agreement

__all__ = ["MEMORY_TAGS", "ROLLOUT_BACKENDS", "Response", "RolloutEngine", "SamplingParams", "logprob_agreement"]
