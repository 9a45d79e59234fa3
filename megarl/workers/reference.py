"""The reference role: the frozen initial policy, for the KL penalty or loss; kept in host memory between its passes
unless `ref.megatron.param_offload` is false."""

from __future__ import annotations

from functools import partial

import torch

from megarl.columns import REF_LOG_PROB, SEQUENCES, stage
from megarl.models.roles import build_reference
from megarl.workers import join_mesh
from megarl.workers.actor import ActorWorker
from megarl.workers.sequences import reference_columns
from megarl.workers.inputs import ReferenceInputs
from parallel.batch import Batch
from parallel.dispatch import Collect, Dispatch, worker_method
from parallel.worker import Worker


class ReferenceWorker(Worker):
    def __init__(self, inputs: ReferenceInputs, beside: ActorWorker | None = None):
        """`beside`: the actor, when this role shares its processes (and so its GPUs' cached blocks)."""
        join_mesh(inputs.model)
        self.inputs = inputs
        self.model = build_reference(inputs.model.path, inputs.model.megatron, bf16=torch.cuda.is_available(),
                                     param_offload=inputs.param_offload, blocks=beside.model.blocks if beside else None)

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    @stage(reads=SEQUENCES, writes=(REF_LOG_PROB,))
    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        """`ref_log_prob` [B, R] at the rollout temperature."""
        columns = reference_columns(batch, self.inputs.log_prob.split,
                                    partial(self.model.logprobs, temperature=self.inputs.temperature))
        if not self.inputs.param_offload:
            # An offloaded reference hands its pass's cached blocks back with its weights; a resident one does here,
            # so that the next phase starts from the same cache (kept, they made the next phase's peak:
            # docs/benchmarks.md).
            torch.cuda.empty_cache()
        return columns
