"""The actor role: megatron policy model of the recipe's mesh, and its passes over a step's batch.

The PPO update works on packed sequences, split over context-parallel ranks, so every loss is a per-token
weighted sum: `token_weights` gives each response token its weight under `actor.loss_agg_mode` from the
mini-batch's global token and sequence counts, and a micro-batch's loss is Σ weight × loss over its own tokens.
Metrics are sums of such contributions, all-reduced over data and context parallel ranks."""

from __future__ import annotations

import torch
import torch.distributed as dist
from megatron.core import parallel_state

from megarl.algorithms import POLICY_LOSSES, kl_penalty, token_weights
from megarl.config.schema import MegaRLConfig
from megarl.models.logprobs import vocab_parallel_logprobs_and_entropy
from megarl.models.packing import pack_sequences, token_budget_micro_batches
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

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    def update_actor(self, batch: Batch) -> dict[str, float]:
        """PPO epochs over this rank's part in mini-batches (one optimizer step each) of micro-batches; needs
        `old_log_probs`, `advantages` (and `ref_log_prob` with `actor.use_kl_loss`). Returns verl's `actor/*`
        metrics averaged over the optimizer steps, identical on every rank."""
        actor = self.cfg.actor
        per_rank = actor.ppo_mini_batch_size * self.cfg.rollout.n // parallel_state.get_data_parallel_world_size()
        totals: dict[str, float] = {}
        steps = 0
        for _ in range(actor.ppo_epochs):
            for start in range(0, len(batch), per_rank):
                for key, value in self._update_mini_batch(batch.select(indices=slice(start, start + per_rank))).items():
                    totals[key] = totals.get(key, 0.0) + value
                steps += 1
        return {f"actor/{key}": value / steps for key, value in totals.items()}

    def _update_mini_batch(self, part: Batch) -> dict[str, float]:
        actor, device = self.cfg.actor, self.role.device
        mask = part["response_mask"]
        counts = torch.stack([mask.sum(), (mask.sum(-1) > 0).sum().float()]).to(device)
        dist.all_reduce(counts, group=parallel_state.get_data_parallel_group())
        tokens, sequences_count = counts.tolist()
        fields = {
            "old_log_probs": part["old_log_probs"], "advantages": part["advantages"], "mask": mask,
            "weights": token_weights(mask, actor.loss_agg_mode, tokens, sequences_count,
                                     self.cfg.data.max_response_length),
            "token_mean": token_weights(mask, "token-mean", tokens),
        }
        if actor.use_kl_loss:
            fields["ref_log_prob"] = part["ref_log_prob"]
        seqs = sequences(part)
        per_token = {name: at_next_token_positions(part, values) for name, values in fields.items()}
        groups = micro_batches([len(s) for s in seqs], actor.use_dynamic_bsz, actor.ppo_micro_batch_size_per_gpu,
                               actor.ppo_max_token_len_per_gpu)
        cp_size, cp_rank = parallel_state.get_context_parallel_world_size(), parallel_state.get_context_parallel_rank()
        packed = [pack_sequences([seqs[i] for i in group], cp_size, cp_rank, device,
                                 {name: [values[i] for i in group] for name, values in per_token.items()})
                  for group in groups]
        policy_loss = POLICY_LOSSES.get(actor.policy_loss)
        temperature = self.cfg.rollout.temperature or 1.0

        def loss_fn(logits, batch):
            f = batch.token_fields
            logprobs, entropy = vocab_parallel_logprobs_and_entropy(logits, batch.labels, temperature)
            pg_loss, clipfrac, ppo_kl, clipfrac_lower = policy_loss(
                f["old_log_probs"], logprobs, f["advantages"], f["mask"], actor.clip_ratio_low,
                actor.clip_ratio_high, actor.clip_ratio_c, weights=f["weights"])
            share = f["mask"].sum() / max(tokens, 1.0)  # this micro-batch's share of the mini-batch's tokens
            entropy_term = (entropy * f["weights"]).sum()
            loss = pg_loss - actor.entropy_coeff * entropy_term
            metrics = {"pg_loss": pg_loss.item(), "pg_clipfrac": (clipfrac * share).item(),
                       "ppo_kl": (ppo_kl * share).item(), "pg_clipfrac_lower": (clipfrac_lower * share).item(),
                       "entropy": (entropy * f["token_mean"]).sum().item()}
            if actor.use_kl_loss:
                kl = (kl_penalty(logprobs, f["ref_log_prob"], actor.kl_loss_type) * f["weights"]).sum()
                loss = loss + actor.kl_loss_coef * kl
                metrics["kl_loss"] = kl.item()
            return loss, metrics

        result = self.role.train_step(packed, loss_fn)
        summed = {k: v for k, v in result.items() if k not in ("grad_norm", "lr", "update_successful")}
        if parallel_state.is_pipeline_last_stage(ignore_virtual=True):
            values = torch.tensor([summed[k] for k in sorted(summed)], dtype=torch.float64, device=device)
            dist.all_reduce(values, group=parallel_state.get_data_parallel_group(with_context_parallel=True))
            summed = dict(zip(sorted(summed), values.tolist()))
        return {**summed, "grad_norm": result["grad_norm"], "lr": result["lr"]}


def at_next_token_positions(batch: Batch, values: torch.Tensor) -> list[torch.Tensor]:
    """[B, R] response values → per sample, a tensor over next-token positions (length L − 1, position t about
    token t + 1), as `pack_sequences` takes token fields; zero on the prompt."""
    lengths = batch["response_mask"].sum(dim=1).long().tolist()
    out = []
    for prompt, row, length in zip(batch["prompt_ids"], values, lengths):
        field = torch.zeros(len(prompt) + length - 1, dtype=torch.float32)
        field[len(prompt) - 1 :] = row[:length].float()
        out.append(field)
    return out
