"""How the actor's weights reach the rollout engines (`megarl.trainer.roles.WeightSync`), one strategy per placement of
the engines, chosen once where the roles are spawned (megarl/trainer/spawn.py):

- `ColocatedSync`: engines beside the actor hand their memory to training after the step's generation (`release`)
  and take it back around the sync: the engine's weights (`resume`), the actor's streamed into them through the
  reshard layer (`update_weights`), then its KV cache (`resume` again: the large part, once the sync's buckets are
  gone).
- `BridgeSync`: engines on GPUs of their own keep their memory; the actor's first rank sends its weights over the
  bridge (parallel/weight_bridge.py). Each rollout rank runs its calls in order, so the engines first finish the
  generation in flight (`sync_wait`, which is not the sync's time).

`phase(name)` times each part (the loop's `timed`); the sync after a checkpoint's load runs outside any step."""

from __future__ import annotations

from megarl.rollout.base import KV_CACHE, WEIGHTS
from megarl.trainer.phases import Phase, untimed
from megarl.workers.groups import ColocatedRolloutGroup, PooledRolloutGroup, WeightSenderGroup


class ColocatedSync:
    def __init__(self, rollout: ColocatedRolloutGroup):
        """`rollout`: recovering from an engine's death in the run (megarl/trainer/recovery.py)."""
        self.rollout = rollout

    def release(self, phase: Phase) -> None:
        with phase("release"):
            self.rollout.release()

    def sync(self, phase: Phase = untimed) -> dict[str, float]:
        with phase("resume"):
            self.rollout.resume([WEIGHTS])
        with phase("update_weights"):
            metrics = self.rollout.sync_weights()
        with phase("resume"):
            self.rollout.resume([KV_CACHE])
        return metrics


class BridgeSync:
    def __init__(self, rollout: PooledRolloutGroup, sender: WeightSenderGroup):
        self.rollout, self.sender = rollout, sender

    def release(self, phase: Phase) -> None:
        """Nothing: the engines keep their GPUs."""

    def sync(self, phase: Phase = untimed) -> dict[str, float]:
        with phase("sync_wait"):
            self.rollout.idle()
        with phase("update_weights"):
            received = self.rollout.receive_weights_async()  # first: both ends meet in the bridge's collectives
            sent = self.sender.send_weights_async()
            return {**sent.result(), **received.result()}
