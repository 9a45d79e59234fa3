"""The actor role: megatron policy model of the recipe's mesh, and its passes over a step's batch."""

from __future__ import annotations

import torch

from megarl.config.schema import MegaRLConfig
from megarl.models.packing import token_budget_micro_batches
from megarl.models.roles import build_actor
from megarl.rollout.batch import response_values, sequences
from parallel import topology
from parallel.batch import Batch
from parallel.dispatch import Collect, Dispatch, worker_method
from parallel.worker import Worker


def micro_batches(lengths: list[int], dynamic: bool, per_gpu: int, max_tokens: int) -> list[list[int]]:
    """Sample indices per micro-batch: by token budget (`use_dynamic_bsz`) or `per_gpu` samples at a time."""
    if dynamic:
        return token_budget_micro_batches(lengths, max_tokens)
    return [list(range(i, min(i + per_gpu, len(lengths)))) for i in range(0, len(lengths), per_gpu)]


class ActorWorker(Worker):
    def __init__(self, cfg: MegaRLConfig, total_steps: int):
        megatron = cfg.actor.megatron
        topology.init_model_parallel(megatron.tensor_model_parallel_size, megatron.pipeline_model_parallel_size,
                                     megatron.context_parallel_size, seed=cfg.trainer.seed)
        self.cfg = cfg
        self.role = build_actor(cfg.model.path, megatron, cfg.actor.optim, total_steps, bf16=torch.cuda.is_available())

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    def compute_log_prob(self, batch: Batch) -> Batch:
        """`old_log_probs` [B, R] of the responses under the current policy, at the rollout temperature (the
        distribution the engine sampled from)."""
        seqs = sequences(batch)
        actor = self.cfg.actor
        groups = micro_batches([len(s) for s in seqs], actor.use_dynamic_bsz, actor.log_prob_micro_batch_size_per_gpu,
                               actor.log_prob_max_token_len_per_gpu)
        temperature = self.cfg.rollout.temperature or 1.0  # greedy sampling: the untempered distribution
        logprobs = self.role.logprobs(seqs, groups, temperature=temperature)["logprobs"]
        return Batch({"old_log_probs": response_values(batch, logprobs)})
