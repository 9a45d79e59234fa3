"""Work beside generation (the rollout's async mode): each response is handed over as it finishes and worked on in a
thread while the engine goes on with the others, so that reward work that takes time (a user's function, a sandbox,
a judge) hides behind generation instead of following it.

The thread takes every item waiting when it is free and works on them together (a reward pool scores them in
parallel over its workers; a judge's engine batches them). What comes out for an item is what the batch's work would
have computed for it, so the batch's scores, metrics and error report are those of the synchronous mode.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Generic, Optional, Sequence, TypeVar

from megarl.rewards.outcome import Outcome
from megarl.rewards.scorer import RewardScorer

Item = TypeVar("Item")
Result = TypeVar("Result")
_DONE = object()


class BatchingStream(Generic[Item, Result]):
    """`put` items as they arrive, then `results()` once every one is in: one per index, in index order (None at an
    index never put), and `done_at()`: when each result came (time.perf_counter). `work` maps the items waiting to
    their results, in order. Used as a context, it ends its thread however the generation ended."""

    def __init__(self, work: Callable[[list[Item]], Sequence[Result]], count: int, name: str):
        self.work = work
        self._results: list[Optional[Result]] = [None] * count
        self._done_at: list[Optional[float]] = [None] * count
        self.failure: Optional[BaseException] = None
        self.waiting: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, name=f"megarl-streaming-{name}", daemon=True)
        self.thread.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._finish()

    def put(self, index: int, item: Item) -> None:
        self.waiting.put((index, item))

    def results(self) -> list[Optional[Result]]:
        """Waits for the items submitted so far; a failure of the work itself is raised here."""
        self._finish()
        if self.failure is not None:
            raise self.failure
        return self._results

    def done_at(self) -> list[Optional[float]]:
        self.results()
        return self._done_at

    def has_result(self, index: int) -> bool:
        """Whether the item at `index` has its result already (without waiting for the others)."""
        return self._done_at[index] is not None

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
                    results = self.work([item for _, item in work])
                    now = time.perf_counter()
                    for (index, _), result in zip(work, results, strict=True):
                        self._results[index], self._done_at[index] = result, now
                except BaseException as e:  # raised to the caller by results()
                    self.failure = e
            if len(work) < len(taken):
                return


class StreamingScorer(BatchingStream[Any, Outcome]):
    """The rules' or a reward function's scores: per sample, the Outcome the batch scorer would have computed for it
    (RewardScorer.score_samples)."""

    def __init__(self, scorer: RewardScorer, count: int):
        super().__init__(scorer.score_samples, count, "scorer")
        self.scorer = scorer

    def submit(self, index: int, response_ids: Sequence[int], data_source: str, ground_truth: Any,
               extra_info: dict | None) -> None:
        self.put(index, self.scorer.sample(response_ids, data_source, ground_truth, extra_info))

    def outcomes(self) -> list[Optional[Outcome]]:
        """Waits for the samples submitted so far; a failure of the scoring itself (an unknown data_source, a reward
        function that cannot be loaded) is raised here."""
        return self.results()
