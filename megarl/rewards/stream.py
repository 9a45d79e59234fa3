"""Scoring beside generation (the rollout's async mode): each response is handed over as it finishes and scored in
a thread while the engine goes on with the others, so that reward work that takes time (a user's function, a
sandbox) hides behind generation instead of following it.

The thread takes every sample waiting when it is free: with a reward pool (`reward.function`) they are scored
together, in parallel over its workers; rule rewards score one after another. What comes out for a sample is the
Outcome the batch scorer would have computed for it (RewardScorer.score_samples), so the batch's scores, metrics
and error report are those of the synchronous mode.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Optional, Sequence

from megarl.rewards.outcome import Outcome
from megarl.rewards.scorer import RewardScorer

_DONE = object()


class StreamingScorer:
    """`submit` responses as they finish, then `outcomes()` once every one is in: one per index, in index order
    (None at an index never submitted). Used as a context, it ends its thread however the generation ended."""

    def __init__(self, scorer: RewardScorer, count: int):
        self.scorer = scorer
        self.results: list[Optional[Outcome]] = [None] * count
        self.failure: Optional[BaseException] = None
        self.waiting: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="megarl-streaming-scorer", daemon=True)
        self.thread.start()

    def __enter__(self) -> StreamingScorer:
        return self

    def __exit__(self, *exc) -> None:
        self._finish()

    def submit(self, index: int, response_ids: Sequence[int], data_source: str, ground_truth: Any,
               extra_info: dict | None) -> None:
        self.waiting.put((index, self.scorer.sample(response_ids, data_source, ground_truth, extra_info)))

    def outcomes(self) -> list[Optional[Outcome]]:
        """Waits for the samples submitted so far; a failure of the scoring itself (an unknown data_source, a reward
        function that cannot be loaded) is raised here."""
        self._finish()
        if self.failure is not None:
            raise self.failure
        return self.results

    def _finish(self) -> None:
        if self.thread.is_alive():
            self.waiting.put(_DONE)
            self.thread.join()

    def _run(self) -> None:
        while True:
            taken = [self.waiting.get()]
            while not self.waiting.empty():
                taken.append(self.waiting.get())
            work = [item for item in taken if item is not _DONE]
            if work and self.failure is None:
                try:
                    for (index, _), outcome in zip(work, self.scorer.score_samples([s for _, s in work])):
                        self.results[index] = outcome
                except BaseException as e:  # raised to the caller by outcomes()
                    self.failure = e
            if len(work) < len(taken):
                return
