"""The actor role: the megatron policy of the recipe's mesh, its log-prob pass and its PPO update (the shared
update machinery, per-token loss weights included, is in `megarl/workers/updates.py`)."""

from __future__ import annotations

import torch

from megarl.algorithms import POLICY_LOSSES, kl_penalty
from megarl.config.schema import MegaRLConfig
from megarl.models.logprobs import vocab_parallel_logprobs_and_entropy
from megarl.models.roles import build_actor
from megarl.rollout.batch import response_values, sequences
from megarl.trainer.perf import device_stats
from megarl.workers import TrainedWorker, join_mesh
from megarl.workers.updates import micro_batches, pack_mini_batch, ppo_epochs, reduce_metrics
from parallel.batch import Batch
from parallel.dispatch import Collect, Dispatch, worker_method


class ActorWorker(TrainedWorker):
    def __init__(self, cfg: MegaRLConfig, total_steps: int):
        megatron = cfg.actor.megatron
        join_mesh(megatron, cfg.trainer.seed)
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

    @worker_method(collect=Collect.ALL)
    def device_stats(self) -> dict:
        return device_stats()

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    def update_actor(self, batch: Batch) -> dict[str, float]:
        """PPO epochs over this rank's part in mini-batches (one optimizer step each) of micro-batches; needs
        `old_log_probs`, `advantages` (and `ref_log_prob` with `actor.use_kl_loss`). Returns verl's `actor/*`
        metrics averaged over the optimizer steps, identical on every rank."""
        return ppo_epochs(batch, self.cfg.actor, self.cfg.rollout.n, self._update_mini_batch, "actor")

    def _update_mini_batch(self, part: Batch) -> dict[str, float]:
        actor, device = self.cfg.actor, self.role.device
        fields = {"old_log_probs": part["old_log_probs"], "advantages": part["advantages"]}
        if actor.use_kl_loss:
            fields["ref_log_prob"] = part["ref_log_prob"]
        packed, tokens = pack_mini_batch(part, fields, actor.loss_agg_mode, self.cfg.data.max_response_length,
                                         actor, device)
        policy_loss = POLICY_LOSSES.get(actor.policy_loss)
        temperature = self.cfg.rollout.temperature or 1.0

        def loss_fn(logits, batch):
            f = batch.token_fields
            logprobs, entropy = vocab_parallel_logprobs_and_entropy(logits, batch.labels, temperature)
            pg_loss, clipfrac, ppo_kl, clipfrac_lower = policy_loss(
                f["old_log_probs"], logprobs, f["advantages"], f["mask"], actor.clip_ratio_low,
                actor.clip_ratio_high, actor.clip_ratio_c, weights=f["weights"])
            share = f["mask"].sum() / max(tokens, 1.0)  # this micro-batch's share of the mini-batch's tokens
            loss = pg_loss - actor.entropy_coeff * (entropy * f["weights"]).sum()
            metrics = {"pg_loss": pg_loss.item(), "pg_clipfrac": (clipfrac * share).item(),
                       "ppo_kl": (ppo_kl * share).item(), "pg_clipfrac_lower": (clipfrac_lower * share).item(),
                       "entropy": (entropy * f["token_mean"]).sum().item()}
            if actor.use_kl_loss:
                kl = (kl_penalty(logprobs, f["ref_log_prob"], actor.kl_loss_type) * f["weights"]).sum()
                loss = loss + actor.kl_loss_coef * kl
                metrics["kl_loss"] = kl.item()
            return loss, metrics

        return reduce_metrics(self.role.train_step(packed, loss_fn), device)
