"""The actor role: the megatron policy of the recipe's mesh, its log-prob pass and its PPO update (the shared
update machinery, per-token loss weights included, is in `megarl/workers/updates.py`)."""

from __future__ import annotations

from functools import partial

import torch
import torch.distributed as dist
from megatron.core import parallel_state

from megarl.algorithms import POLICY_LOSSES, kl_penalty, token_weights
from megarl.columns import (ADVANTAGES, ENTROPYS, OLD_LOG_PROBS, PROMPT_IDS, PTX_PROMPT_IDS, PTX_RESPONSE_MASK,
                            PTX_RESPONSES, REF_LOG_PROB, RESPONSE_MASK, RESPONSES, ROLLOUT_IS_WEIGHTS, ROLLOUT_RS_MASK,
                            ROUTED_EXPERTS, ROUTING_FLIPS, SEQUENCES, stage)
from megarl.models.logprobs import vocab_parallel_logprobs_and_entropy
from megarl.models.packing import PackedBatch, padded_tokens
from megarl.models.roles import build_actor
from megarl.workers import TrainedWorker, join_mesh
from megarl.workers.sequences import reference_columns, response_values, sequences
from megarl.workers.inputs import ActorInputs
from megarl.workers.updates import loss_fields, pack_groups, ppo_epochs, reduce_metrics
from parallel.batch import Batch
from parallel.dispatch import Collect, Dispatch, worker_method
from parallel.memory import device_stats


class ActorWorker(TrainedWorker):
    def __init__(self, inputs: ActorInputs, beside: ActorWorker | None = None):
        """`beside`: another actor in these processes, whose GPUs' cached blocks it shares (an A/B benchmark's)."""
        join_mesh(inputs.model)
        self.inputs = inputs
        self.model = build_actor(inputs.model.path, inputs.model.megatron, inputs.optim, inputs.total_steps,
                                 bf16=torch.cuda.is_available(), lora=inputs.lora, seed=inputs.model.seed,
                                 blocks=beside.model.blocks if beside else None, router_replay=inputs.router_replay)

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    @stage(reads=SEQUENCES, writes=(OLD_LOG_PROBS,), reads_if_present=(ROUTED_EXPERTS,),
           may_write=(ENTROPYS, ROUTING_FLIPS))
    def compute_log_prob(self, batch: Batch) -> Batch:
        """`old_log_probs` [B, R] of the responses under the current policy, at the rollout temperature (and the
        next-token distribution's `entropys` [B, R] with `log_prob_entropy`). With router replay, under the engine's
        routing, and `routing_flips` [B]: how often the actor's routers would have chosen otherwise."""
        seqs = sequences(batch)
        groups = self.inputs.log_prob.split([len(s) for s in seqs])
        entropy = self.inputs.log_prob_entropy
        routing = self._routing(batch)
        computed = self.model.logprobs(seqs, groups, temperature=self.inputs.temperature, with_entropy=entropy,
                                       routing=routing)
        columns = {OLD_LOG_PROBS: response_values(batch, computed["logprobs"])}
        if entropy:
            columns[ENTROPYS] = response_values(batch, computed["entropy"])
        if routing is not None:
            columns[ROUTING_FLIPS] = torch.stack([flips.float().sum() / flips.numel() / r.shape[1]
                                                  for flips, r in zip(computed["routing_flips"], routing)]).cpu()
        return Batch(columns)

    def _routing(self, batch: Batch) -> list[torch.Tensor] | None:
        """The engine's routing of each sample, where this actor replays it (R3)."""
        if not self.inputs.router_replay:
            return None
        if ROUTED_EXPERTS not in batch:
            raise RuntimeError("actor.router_replay.mode=R3, but the rollout engine returned no routed experts: its "
                               "backend must record them (RolloutEngine.from_config's record_routing)")
        return list(batch[ROUTED_EXPERTS])

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    @stage(reads=SEQUENCES, writes=(REF_LOG_PROB,))
    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        """A LoRA actor as the reference policy: `ref_log_prob` [B, R] of the base model (adapters disabled)."""
        batching = self.inputs.reference_log_prob
        if batching is None:
            raise RuntimeError("compute_ref_log_prob of an actor without LoRA: its reference is a role of its own")
        return reference_columns(batch, batching.split,
                                 partial(self.model.base_logprobs, temperature=self.inputs.temperature))

    @worker_method(collect=Collect.ALL)
    def device_stats(self) -> dict:
        return device_stats()

    @worker_method(Dispatch.DP_SPLIT, Collect.AGREED)
    @stage(reads=(*SEQUENCES, OLD_LOG_PROBS, ADVANTAGES),
           reads_if_present=(REF_LOG_PROB, ROLLOUT_IS_WEIGHTS, ROLLOUT_RS_MASK, PTX_PROMPT_IDS, PTX_RESPONSES,
                             PTX_RESPONSE_MASK, ROUTED_EXPERTS))
    def update_actor(self, batch: Batch) -> dict[str, float]:
        """PPO epochs over this rank's part in mini-batches (one optimizer step each) of micro-batches; needs
        `old_log_probs`, `advantages` (and `ref_log_prob` with a KL loss; `ptx_prompt_ids`, `ptx_responses`,
        `ptx_response_mask` with PPO-ptx). Returns verl's `actor/*` metrics averaged over the optimizer steps,
        identical on every rank."""
        with self.model.updating():
            return ppo_epochs(batch, self.inputs.update, self._update_mini_batch, "actor")

    def _update_mini_batch(self, part: Batch) -> dict[str, float]:
        loss, device = self.inputs.loss, self.model.device
        fields = {OLD_LOG_PROBS: part[OLD_LOG_PROBS], ADVANTAGES: part[ADVANTAGES]}
        if loss.kl_loss_coef is not None:
            fields[REF_LOG_PROB] = part[REF_LOG_PROB]
        if ROLLOUT_IS_WEIGHTS in part:  # rollout correction
            fields[ROLLOUT_IS_WEIGHTS] = part[ROLLOUT_IS_WEIGHTS]
        # Rejected tokens (rollout correction) leave the loss and its denominators.
        mask = part[RESPONSE_MASK] * part[ROLLOUT_RS_MASK] if ROLLOUT_RS_MASK in part else None
        fields, tokens = loss_fields(part, fields, self.inputs.update, device, mask)
        packed = self._pass_batches(part, fields, device)
        policy_loss = POLICY_LOSSES.get(loss.name)
        temperature = self.inputs.temperature

        def loss_fn(logits, batch):
            f = batch.token_fields
            if "ptx_weights" in f:  # a pretraining micro-batch: the LM loss, at temperature 1
                logprobs, _ = vocab_parallel_logprobs_and_entropy(logits, batch.labels, with_entropy=False)
                nll = -(logprobs * f["ptx_weights"]).sum()
                return loss.ptx_coef * nll, {"ptx_loss": nll}
            logprobs, entropy = vocab_parallel_logprobs_and_entropy(logits, batch.labels, temperature)
            pg_weights = f["weights"] * f[ROLLOUT_IS_WEIGHTS] if ROLLOUT_IS_WEIGHTS in f else f["weights"]
            pg_loss, clipfrac, ppo_kl, clipfrac_lower = policy_loss(
                f[OLD_LOG_PROBS], logprobs, f[ADVANTAGES], f["mask"], loss.clip_ratio_low,
                loss.clip_ratio_high, loss.clip_ratio_c, weights=pg_weights)
            share = f["mask"].sum() / max(tokens, 1.0)  # this micro-batch's share of the mini-batch's tokens
            total = pg_loss - loss.entropy_coeff * (entropy * f["weights"]).sum()
            metrics = {"pg_loss": pg_loss, "pg_clipfrac": clipfrac * share, "ppo_kl": ppo_kl * share,
                       "pg_clipfrac_lower": clipfrac_lower * share, "entropy": (entropy * f["token_mean"]).sum()}
            if loss.kl_loss_coef is not None:
                kl = (kl_penalty(logprobs, f[REF_LOG_PROB], loss.kl_loss_type) * f["weights"]).sum()
                total = total + loss.kl_loss_coef * kl
                metrics["kl_loss"] = kl
            return total, metrics

        return reduce_metrics(self.model.train_step(packed, loss_fn))

    def _pass_batches(self, part: Batch, fields: dict[str, torch.Tensor], device) -> list[PackedBatch]:
        """The update's micro-batches: the RL samples' and, with PPO-ptx, the pretraining samples' after them. Where
        the model packs a pass to one length, the RL ones are packed again to the pretraining ones' if those are
        longer: lengths agree over an expert-parallel group's ranks, the one packing collective, so they decide
        alike."""
        one_length, seqs = self.model.packs_to_one_length, sequences(part)
        groups, routing = self.inputs.update.micro.split([len(s) for s in seqs]), self._routing(part)
        packed = pack_groups(part, seqs, fields, groups, device, routing, one_length)
        if self.inputs.loss.ptx_coef <= 0:
            return packed
        ptx = self._ptx_micro_batches(part, device, padded_tokens(packed) if one_length else 0)
        if one_length and padded_tokens(ptx) > padded_tokens(packed):
            packed = pack_groups(part, seqs, fields, groups, device, routing, one_length, padded_tokens(ptx))
        return packed + ptx

    def _ptx_micro_batches(self, part: Batch, device, min_tokens: int) -> list:
        """The mini-batch's pretraining samples (`ptx_*` columns, PPO-ptx) packed like its RL samples (each
        micro-batch of at least `min_tokens` where the model packs to one length), weighted so that their summed loss
        is the mean NLL over the mini-batch's pretraining tokens on all data-parallel ranks."""
        ptx = Batch({RESPONSES: part[PTX_RESPONSES], RESPONSE_MASK: part[PTX_RESPONSE_MASK]},
                    {PROMPT_IDS: part[PTX_PROMPT_IDS]})
        mask = ptx[RESPONSE_MASK]
        tokens = mask.sum().to(device)
        dist.all_reduce(tokens, group=parallel_state.get_data_parallel_group())
        seqs = sequences(ptx)
        weights = token_weights(mask, "token-mean", tokens.item())
        return pack_groups(ptx, seqs, {"ptx_weights": weights}, self.inputs.update.micro.split([len(s) for s in seqs]),
                           device, one_length=self.model.packs_to_one_length, min_tokens=min_tokens)
