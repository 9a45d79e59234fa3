"""Score a batch of responses: decode, score each sample (rules in this process, a user's function in a pool of
worker processes), place each score on the response's last valid token."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import torch

from megarl.columns import response_lengths
from megarl.rewards.code import CODE_SOURCES, CodeScorer
from megarl.rewards.outcome import Outcome, RewardFunctionError, call_reward
from megarl.rewards.pool import RewardPool
from megarl.rewards.registry import GroundTruthError, default_compute_score
from megarl.sandbox import Sandbox

if TYPE_CHECKING:
    from megarl.config.schema import CodeRewardConfig, RewardConfig, SandboxConfig

logger = logging.getLogger(__name__)


@dataclass
class RewardResult:
    token_level_scores: torch.Tensor  # [batch, response_length]: the score on each last valid token
    scores: torch.Tensor  # [batch]
    extra_info: dict[str, list] = field(default_factory=dict)  # extra keys of dict-returning functions
    num_errors: int = 0
    # Samples past a time limit: the pool's reward.timeout_s, or a code test's sandbox.wall_s or cpu_s. None: only
    # rules scored it, in the driver, where nothing times out (and no metric).
    num_timeouts: Optional[int] = None
    output_overflow_bytes: int = 0  # printed by the pool's calls past the console's share, into the reward log

    @property
    def metrics(self) -> dict[str, float]:
        metrics = {"reward/num_errors": float(self.num_errors)}
        if self.num_timeouts is not None:
            metrics["reward/num_timeouts"] = float(self.num_timeouts)
            metrics["reward/output_overflow_bytes"] = float(self.output_overflow_bytes)
        return metrics


class RewardScorer:
    """Scores each decoded response with `compute_score` in this process, or in `pool`'s worker processes.

    A sample whose reward function raises (or returns something that is not a finite number) scores 0, is
    logged with its data_source, ground truth, response tail and traceback (the first `max_logged_errors`
    of a batch), and is counted in `reward/num_errors`; one that runs past the pool's timeout scores 0, is logged
    and counted in `reward/num_timeouts`. If every sample of a batch fails, the function (or the data's ground
    truth) is broken: RewardFunctionError stops the run before the batch can update the model. An unknown
    data_source is a data error and propagates at once. With compute_score, samples of a code data_source run their
    tests in a sandbox (`sandbox`, started at the first such sample) under `code`'s mode. Close the scorer (or use it
    as a context) to end a pool or a sandbox.
    """

    def __init__(self, tokenizer, compute_score: Callable | None = None, kwargs: dict | None = None,
                 max_logged_errors: int = 3, pool: RewardPool | None = None,
                 code: CodeRewardConfig | None = None, sandbox: SandboxConfig | None = None):
        if (compute_score is None) == (pool is None):
            raise TypeError("RewardScorer takes exactly one of compute_score (run in this process) and pool")
        self.tokenizer = tokenizer
        self.compute_score, self.pool = compute_score, pool
        self.kwargs = dict(kwargs or {})
        self.max_logged_errors = max_logged_errors
        self.code_config, self.sandbox_config = code, sandbox
        self._code: Optional[CodeScorer] = None

    @classmethod
    def from_config(cls, tokenizer, reward: RewardConfig, output_log: str | None = None) -> RewardScorer:
        """Rule rewards score here: our scorers cannot hang, and a pool would cost its start and a round trip per
        sample for nothing. A user's function (`reward.function`) runs in a RewardPool, whose calls' long outputs go
        to `output_log`."""
        if reward.function is None:
            return cls(tokenizer, default_compute_score, reward.kwargs, code=reward.code, sandbox=reward.sandbox)
        return cls(tokenizer, pool=RewardPool(reward.function, reward.kwargs, reward.timeout_s, reward.workers,
                                              output_log))

    def __enter__(self) -> RewardScorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        if self._code is not None:
            self._code.sandbox.close()

    def __call__(
        self,
        responses: torch.Tensor,
        response_mask: torch.Tensor,
        data_sources: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Sequence[dict | None] | None = None,
        outcomes: Sequence[Outcome] | None = None,
    ) -> RewardResult:
        """The batch's result; `outcomes`: each sample's, already scored as its response finished (the rollout's
        async mode: megarl/rewards/stream.py), so only reported and placed here."""
        batch = responses.shape[0]
        extra_infos = extra_infos if extra_infos is not None else [None] * batch
        if not len(data_sources) == len(ground_truths) == len(extra_infos) == batch:
            raise ValueError("responses, data_sources, ground_truths and extra_infos differ in length")
        lengths = response_lengths(response_mask).tolist()
        samples = [self.sample(row[:n].tolist(), source, truth, info)
                   for row, n, source, truth, info in zip(responses, lengths, data_sources, ground_truths, extra_infos)]
        outcomes = list(outcomes) if outcomes is not None else self.score_samples(samples)
        num_errors, num_timeouts = self._report(outcomes, samples)
        scores = torch.tensor([o.score for o in outcomes], dtype=torch.float32, device=responses.device)
        extra: dict[str, list] = {}
        for i, outcome in enumerate(outcomes):
            for key, value in outcome.extra.items():
                extra.setdefault(key, [None] * batch)[i] = value
        token_level_scores = torch.zeros(responses.shape, dtype=torch.float32, device=responses.device)
        rows = [i for i, n in enumerate(lengths) if n > 0]
        token_level_scores[rows, [lengths[i] - 1 for i in rows]] = scores[rows]
        if self.pool is None:
            num_timeouts = sum(bool(o.extra.get("sandbox_timeouts")) for o in outcomes)
        timed = self.pool is not None or any("sandbox_timeouts" in o.extra for o in outcomes)
        return RewardResult(token_level_scores, scores, extra, num_errors, num_timeouts if timed else None,
                            sum(o.output_overflow for o in outcomes))

    def sample(self, response_ids: Sequence[int], data_source: str, ground_truth: Any, extra_info: dict | None) -> dict:
        """The reward function's arguments for one response (its valid token ids)."""
        return {"data_source": data_source, "ground_truth": ground_truth, "extra_info": extra_info,
                "solution_str": self.tokenizer.decode(list(response_ids), skip_special_tokens=True)}

    def score_samples(self, samples: Sequence[dict]) -> list[Outcome]:
        """Each sample's Outcome: in the pool's workers, or here."""
        if self.pool is not None:
            return self.pool.map(samples)
        code_rows = [i for i, sample in enumerate(samples) if sample["data_source"] in CODE_SOURCES]
        outcomes = dict(zip(code_rows, self.code_scorer().score([samples[i] for i in code_rows]))) if code_rows else {}
        return [outcomes[i] if i in outcomes else call_reward(self.compute_score, sample, self.kwargs)
                for i, sample in enumerate(samples)]

    def code_scorer(self) -> CodeScorer:
        """The code data_sources' scorer, its sandbox started (and probed) at the first call."""
        if self._code is None:
            if self.code_config is None or self.sandbox_config is None:
                raise TypeError("a code data_source needs the scorer's code and sandbox configs (reward.code, "
                                "reward.sandbox)")
            self._code = CodeScorer(Sandbox(self.sandbox_config), self.code_config.mode)
        return self._code

    def _report(self, outcomes: list[Outcome], samples: list[dict]) -> tuple[int, int]:
        """Log the first failures and timeouts; (errors, timeouts), unless every sample failed: then raise."""
        errors = [i for i, o in enumerate(outcomes) if o.error is not None]
        timeouts = [i for i, o in enumerate(outcomes) if o.timed_out]
        for i in errors[: self.max_logged_errors]:
            logger.warning(
                "reward function failed on sample %d (data_source=%r, ground_truth=%r, response tail=%r):\n%s",
                i, *_where(samples[i]), outcomes[i].details or f"{outcomes[i].error_type}: {outcomes[i].error}",
            )
        for i in timeouts[: self.max_logged_errors]:
            logger.warning(
                "reward function ran past reward.timeout_s=%s on sample %d (data_source=%r, ground_truth=%r, "
                "response tail=%r): it scores 0 and its worker process was replaced",
                self.pool.timeout_s, i, *_where(samples[i]),
            )
        if outcomes and len(errors) + len(timeouts) == len(outcomes):
            raise RewardFunctionError(self._all_failed(outcomes, errors, timeouts))
        return len(errors), len(timeouts)

    def _all_failed(self, outcomes: list[Outcome], errors: list[int], timeouts: list[int]) -> str:
        first = outcomes[errors[0]] if errors else None
        if not timeouts and all(outcomes[i].error_type == GroundTruthError.__name__ for i in errors):
            return f"no sample of the batch has a usable ground truth: {first.error}"
        reasons = []
        if timeouts:
            reasons.append(f"{len(timeouts)} ran past reward.timeout_s={self.pool.timeout_s}s (raise it if the "
                           "function is slow; fix the function if it hangs)")
        if errors:
            reasons.append(f"{len(errors)} raised; first failure: {first.error_type}: {first.error}")
        return (f"the reward function {self.function_name} failed on all {len(outcomes)} samples of the batch: "
                f"{'; '.join(reasons)}")

    @property
    def function_name(self) -> str:
        """reward.function's spec, or the in-process scorer's name."""
        if self.pool is not None:
            return self.pool.spec
        return getattr(self.compute_score, "__qualname__", repr(self.compute_score))


def _where(sample: dict) -> tuple:
    """What a log line shows of a failed sample: data_source, ground truth, the response's tail."""
    return sample["data_source"], sample["ground_truth"], sample["solution_str"][-200:]
