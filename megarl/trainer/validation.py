"""Validation: the rollout engines answer every prompt of `data.val_files` with `rollout.val_kwargs` (greedy
unless `do_sample`), the same scorer grades them, and the means per data source become verl's
`val-core/{data_source}/reward/mean@{n}` metrics."""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from megarl.columns import DATA_SOURCE, RESPONSE_MASK, TOKEN_LEVEL_SCORES, response_lengths
from megarl.config.schema import DataConfig
from megarl.data.dataset import PromptLoader, RLDataset
from megarl.rollout.batch import prompt_batch
from megarl.trainer.roles import Rollout
from megarl.trainer.stages import Score, score
from parallel.batch import Batch

VAL_UID_OFFSET = 10**12  # validation uids never collide with a training step's


class Validator:
    def __init__(self, data: DataConfig, n: int, tokenizer, kept_samples: int = 0, tools: Sequence[dict] = ()):
        """`n`: responses per prompt (rollout.val_kwargs.n), the @n of the metric names; `kept_samples`: how many
        of the pass's first samples it returns, generated and scored (-1: all), for the sample logs; `tools`: the
        schemas the prompts show (rollout.multi_turn)."""
        dataset = RLDataset.from_config(data.val_files, tokenizer, data, tools)
        self.loader = PromptLoader(dataset, data.val_batch_size or len(dataset), shuffle=False, drop_last=False)
        self.n, self.kept_samples = n, kept_samples

    def __call__(self, rollout: Rollout, scorer: Score) -> tuple[dict[str, float], list[Batch]]:
        """One pass over the validation set, graded by `scorer`; the engines must hold the current weights.
        Returns the `val-core/*` metrics and the first samples (in the pass's batches, whose widths differ)."""
        scores: dict[str, list[float]] = defaultdict(list)
        lengths: list[float] = []
        kept: list[Batch] = []
        wanted: float = self.kept_samples if self.kept_samples >= 0 else float("inf")
        for index, items in zip(range(len(self.loader)), self.loader):
            batch = rollout.generate(prompt_batch(items, first_uid=VAL_UID_OFFSET + index * self.loader.batch_size),
                                     validate=True)
            scored, _ = score(batch, scorer)
            for source, value in zip(batch[DATA_SOURCE], scored[TOKEN_LEVEL_SCORES].sum(-1).tolist()):
                scores[source].append(value)
            lengths += response_lengths(batch[RESPONSE_MASK]).tolist()
            missing = wanted - sum(len(b) for b in kept)
            if missing > 0:
                kept.append(batch.union(scored).select(indices=list(range(int(min(missing, len(batch)))))))
        metrics = {f"val-core/{source}/reward/mean@{self.n}": sum(v) / len(v) for source, v in scores.items()}
        metrics["val-aux/response_length/mean"] = sum(lengths) / len(lengths)
        return metrics, kept
