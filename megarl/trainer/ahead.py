"""Generation ahead of training (`trainer.staleness` = K ≥ 1, engines on a pool of their own): step t's prompts go to
the engines at the start of step t − K, so the engines generate step t + 1's responses while step t trains.

Each rollout rank runs its calls in the order they come, so a weight sync sent after step t waits for the
generation in flight and the next one sent gets step t's weights: step t trains on responses of the policy K
steps older than the one it updates (`rollout_corr/staleness`), which rollout correction
(`algorithm.rollout_correction.*`) weighs against the recomputed old log-probs.

A checkpoint holds the data loader where it stood before the oldest prompts in flight: a resumed run sends them
again, and the engines generate them with the restored weights.
"""

from __future__ import annotations

from collections import deque
from typing import Iterator

from megarl.data.dataset import PromptLoader
from megarl.trainer.phases import Phase
from megarl.trainer.sampling import StepSampler
from megarl.trainer.roles import Rollout
from parallel.batch import Batch
from parallel.controller import Pending


class AheadSampler:
    """The step's scored batch, its generation sent `staleness` steps earlier."""

    def __init__(self, sampler: StepSampler, rollout: Rollout, loader: PromptLoader, staleness: int, last_step: int):
        self.sampler, self.rollout, self.loader, self.staleness = sampler, rollout, loader, staleness
        self.last_step = last_step
        # (step, the loader's state before its prompts, the generation in flight)
        self.in_flight: deque[tuple[int, dict, Pending[Batch]]] = deque()
        self.next_step: int | None = None

    def __call__(self, step: int, rows: Iterator[dict], phase: Phase) -> tuple[Batch, dict[str, float]]:
        if self.next_step is None:
            self.next_step = step
        while self.next_step <= min(step + self.staleness, self.last_step):
            self._send(self.next_step, rows)
        _, _, pending = self.in_flight.popleft()
        with phase("gen"):
            batch = pending.result()
        batch, metrics = self.sampler.scored(batch, phase)
        # The engines had the weights after step max(0, step - staleness - 1) when the prompts went out.
        metrics["rollout_corr/staleness"] = float(min(step - 1, self.staleness))
        return batch, metrics

    def _send(self, step: int, rows: Iterator[dict]) -> None:
        state = self.loader.state_dict()
        prompts, seed = self.sampler.round_prompts(step, 0, next(rows))
        self.in_flight.append((step, state, self.rollout.generate_async(prompts, seed=seed)))
        self.next_step = step + 1

    def state_dict(self) -> dict:
        """The loader's state before the oldest prompts in flight (they are generated again on resume)."""
        return self.in_flight[0][1] if self.in_flight else self.loader.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state)
