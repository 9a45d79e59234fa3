"""The reference role: the frozen initial policy, kept in host memory between its passes (megarl/models/roles.py
says why), for the KL penalty or loss."""

from __future__ import annotations

import torch

from megarl.config.schema import MegaRLConfig
from megarl.models.roles import build_reference
from megarl.rollout.batch import response_values, sequences
from megarl.workers import join_mesh
from megarl.workers.updates import micro_batches
from parallel.batch import Batch
from parallel.dispatch import Collect, Dispatch, worker_method
from parallel.worker import Worker


class ReferenceWorker(Worker):
    def __init__(self, cfg: MegaRLConfig):
        megatron = cfg.actor.megatron  # colocated with the actor: the same mesh
        join_mesh(megatron, cfg.trainer.seed)
        self.cfg = cfg
        self.role = build_reference(cfg.model.path, megatron, bf16=torch.cuda.is_available())

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        """`ref_log_prob` [B, R] at the rollout temperature; the weights visit the GPU for this pass only."""
        seqs = sequences(batch)
        ref = self.cfg.ref
        groups = micro_batches([len(s) for s in seqs], self.cfg.actor.use_dynamic_bsz,
                               ref.log_prob_micro_batch_size_per_gpu, ref.log_prob_max_token_len_per_gpu)
        self.role.onload()
        try:
            logprobs = self.role.logprobs(seqs, groups, temperature=self.cfg.rollout.temperature or 1.0)["logprobs"]
        finally:
            self.role.offload()
        return Batch({"ref_log_prob": response_values(batch, logprobs)})
