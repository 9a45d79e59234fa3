"""Score a batch of responses: decode, call the reward function per sample, place each score on the
response's last valid token."""

from __future__ import annotations

import logging
import math
import numbers
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from megarl.registry import UnknownNameError

logger = logging.getLogger(__name__)


class RewardFunctionError(RuntimeError):
    """The reward function failed on every sample of a batch: a bug, not a flaky sample."""


@dataclass
class RewardResult:
    token_level_scores: torch.Tensor  # [batch, response_length]: the score on each last valid token
    scores: torch.Tensor  # [batch]
    extra_info: dict[str, list] = field(default_factory=dict)  # extra keys of dict-returning functions
    num_errors: int = 0

    @property
    def metrics(self) -> dict[str, float]:
        return {"reward/num_errors": float(self.num_errors)}


class RewardScorer:
    """Calls `compute_score` on each decoded response.

    A sample whose reward function raises (or returns something that is not a finite number) scores 0, is
    logged with its data_source, ground truth, response tail and traceback (the first `max_logged_errors`
    of a batch), and is counted in `reward/num_errors`. If every sample of a batch fails, the function is
    broken: RewardFunctionError stops the run before the batch can update the model. An unknown data_source
    is a data error and propagates at once.
    """

    def __init__(self, tokenizer, compute_score: Callable, kwargs: dict | None = None, max_logged_errors: int = 3):
        self.tokenizer = tokenizer
        self.compute_score = compute_score
        self.kwargs = dict(kwargs or {})
        self.max_logged_errors = max_logged_errors

    def __call__(
        self,
        responses: torch.Tensor,
        response_mask: torch.Tensor,
        data_sources: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Sequence[dict | None] | None = None,
    ) -> RewardResult:
        batch = responses.shape[0]
        extra_infos = extra_infos if extra_infos is not None else [None] * batch
        if not len(data_sources) == len(ground_truths) == len(extra_infos) == batch:
            raise ValueError("responses, data_sources, ground_truths and extra_infos differ in length")
        lengths = response_mask.sum(dim=-1).long().tolist()
        texts = self.tokenizer.batch_decode(
            [row[:n].tolist() for row, n in zip(responses, lengths)], skip_special_tokens=True
        )
        scores = torch.zeros(batch, dtype=torch.float32, device=responses.device)
        extra: dict[str, list] = {}
        errors: list[int] = []
        for i, text in enumerate(texts):
            try:
                score, sample_extra = _as_score(
                    self.compute_score(
                        data_source=data_sources[i],
                        solution_str=text,
                        ground_truth=ground_truths[i],
                        extra_info=extra_infos[i],
                        **self.kwargs,
                    )
                )
            except UnknownNameError:
                raise
            except Exception as exc:
                errors.append(i)
                if len(errors) <= self.max_logged_errors:
                    logger.warning(
                        "reward function failed on sample %d (data_source=%r, ground_truth=%r, response tail=%r):\n%s",
                        i, data_sources[i], ground_truths[i], text[-200:], traceback.format_exc(),
                    )
                if len(errors) == batch:
                    raise RewardFunctionError(
                        f"the reward function failed on all {batch} samples of the batch; first failure: {exc!r}"
                    ) from exc
                continue
            scores[i] = score
            for key, value in sample_extra.items():
                extra.setdefault(key, [None] * batch)[i] = value
        token_level_scores = torch.zeros(responses.shape, dtype=torch.float32, device=responses.device)
        rows = [i for i, n in enumerate(lengths) if n > 0]
        token_level_scores[rows, [lengths[i] - 1 for i in rows]] = scores[rows]
        return RewardResult(token_level_scores, scores, extra, len(errors))


def _as_score(result: Any) -> tuple[float, dict]:
    extra: dict = {}
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"a reward function returning a dict must include 'score'; got keys {sorted(result)}")
        extra = {k: v for k, v in result.items() if k != "score"}
        result = result["score"]
    if isinstance(result, torch.Tensor) and result.numel() == 1:
        result = result.item()
    if not isinstance(result, numbers.Real) or not math.isfinite(float(result)):
        raise ValueError(f"a reward must be a finite number, got {result!r}")
    return float(result), extra
