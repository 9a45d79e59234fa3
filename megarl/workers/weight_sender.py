"""The actor's side of the weight bridge (parallel/weight_bridge.py) to rollout engines on GPUs of their own: every
rank of the actor streams its weights as full HF tensors through the reshard layer (gathered within tensor-parallel
groups, broadcast across pipeline stages); the actor's first rank sends them over the bridge, bucket by bucket."""

from __future__ import annotations

import os
import time

import torch.distributed as dist

from megarl.models.bridge import load_hf_config
from megarl.models.to_hf import hf_converter
from megarl.workers.actor import ActorWorker
from parallel import topology
from parallel.weight_bridge import WeightBridge
from parallel.dispatch import Collect, worker_method
from parallel.engines import engine_slots
from parallel.worker import Worker


class WeightSenderWorker(Worker):
    def __init__(self, model_path: str, train_tp: int, actor: ActorWorker):
        """`actor`: the actor's role in this process (spawned with its handle)."""
        self.actor = actor.model
        # Slots of one-GPU engines: each rank's holds the full tensors, gathered within its tensor-parallel group.
        slots = engine_slots(dist.get_world_size(), train_tp, 1)
        self.streamer = self.actor.weight_streamer(hf_converter(load_hf_config(model_path)), slots[dist.get_rank()],
                                                   slots)
        self.bridge: WeightBridge | None = None

    @worker_method(collect=Collect.RANK_ZERO)
    def bridge_address(self) -> tuple[str, int]:
        """Where the bridge's store listens: this node (the actor's first rank), a free port."""
        return os.environ.get("MASTER_ADDR", "127.0.0.1"), topology.free_port()

    @worker_method()
    def join_bridge(self, host: str, port: int, size: int, timeout_s: float) -> None:
        if dist.get_rank() == 0:
            self.bridge = WeightBridge(host, port, 0, size, timeout_s)

    @worker_method(collect=Collect.RANK_ZERO)
    def send_weights(self) -> dict[str, float]:
        """Collective over the actor's ranks (and, at the first, the bridge); returns the sync's metrics."""
        start, sent = time.perf_counter(), 0

        def sink(bucket: list) -> None:
            nonlocal sent
            if self.bridge is not None:
                sent += self.bridge.send(bucket)

        with self.actor.weights_in_use():
            stats = self.streamer.sync(sink)
        if self.bridge is not None:
            self.bridge.finish()
        return {"update_weights/stream_s": time.perf_counter() - start, "update_weights/bytes_sent_gb": sent / 1e9,
                "update_weights/bytes_received_gb": stats.bytes_received / 1e9}
