"""The reference role: the frozen initial policy, for the KL penalty or loss; kept in host memory between its passes
unless `ref.megatron.param_offload` is false."""

from __future__ import annotations

from functools import partial

import torch

from megarl.models.roles import build_reference
from megarl.workers import join_mesh
from megarl.workers.columns import reference_columns
from megarl.workers.inputs import ReferenceInputs
from parallel.batch import Batch
from parallel.dispatch import Collect, Dispatch, worker_method
from parallel.worker import Worker


class ReferenceWorker(Worker):
    def __init__(self, inputs: ReferenceInputs):
        join_mesh(inputs.model)
        self.inputs = inputs
        self.model = build_reference(inputs.model.path, inputs.model.megatron, bf16=torch.cuda.is_available(),
                                     param_offload=inputs.param_offload)

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        """`ref_log_prob` [B, R] at the rollout temperature."""
        return reference_columns(batch, self.inputs.log_prob.split,
                                 partial(self.model.logprobs, temperature=self.inputs.temperature))
