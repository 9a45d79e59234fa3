"""Rollout: the engine interface (`base`), its backends, registered by name in `ROLLOUT_BACKENDS` (`sglang`, the
production path; `transformers`, for CPU tests and debugging), and the train/rollout log-prob gate (`gates`)."""

from megarl.rollout import sglang_engine, transformers_engine  # noqa: F401  (they register themselves)
from megarl.rollout.base import MEMORY_TAGS, ROLLOUT_BACKENDS, Response, RolloutEngine, SamplingParams
from megarl.rollout.gates import logprob_agreement

__all__ = ["MEMORY_TAGS", "ROLLOUT_BACKENDS", "Response", "RolloutEngine", "SamplingParams", "logprob_agreement"]
