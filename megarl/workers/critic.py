"""The critic role (PPO's GAE baseline): a megatron value model, its value pass and its clipped value-loss update."""

from __future__ import annotations

import torch

from megarl.algorithms import compute_value_loss
from megarl.config.schema import MegaRLConfig
from megarl.models.roles import build_critic
from megarl.rollout.batch import response_values, sequences
from megarl.workers import TrainedWorker, join_mesh
from megarl.workers.updates import micro_batches, pack_mini_batch, ppo_epochs, reduce_metrics
from parallel.batch import Batch
from parallel.dispatch import Collect, Dispatch, worker_method


class CriticWorker(TrainedWorker):
    def __init__(self, cfg: MegaRLConfig, total_steps: int):
        megatron = cfg.critic.megatron
        join_mesh(megatron, cfg.trainer.seed)
        self.cfg = cfg
        self.role = build_critic(cfg.critic.model.path, megatron, cfg.critic.optim, total_steps,
                                 bf16=torch.cuda.is_available(), seed=cfg.trainer.seed)

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    def compute_values(self, batch: Batch) -> Batch:
        """`values` [B, R]: the value of the state before each response token."""
        seqs = sequences(batch)
        critic = self.cfg.critic
        groups = micro_batches([len(s) for s in seqs], critic.use_dynamic_bsz, critic.forward_micro_batch_size_per_gpu,
                               critic.forward_max_token_len_per_gpu)
        return Batch({"values": response_values(batch, self.role.values(seqs, groups))})

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    def update_critic(self, batch: Batch) -> dict[str, float]:
        """Clipped value-loss epochs over mini-batches; needs `values` and `returns`. Returns verl's
        `critic/vf_loss`, `critic/vf_clipfrac`, `critic/vpred_mean`, `critic/grad_norm`, `critic/lr`."""
        return ppo_epochs(batch, self.cfg.critic, self.cfg.rollout.n, self._update_mini_batch, "critic")

    def _update_mini_batch(self, part: Batch) -> dict[str, float]:
        critic, device = self.cfg.critic, self.role.device
        packed, tokens = pack_mini_batch(part, {"values": part["values"], "returns": part["returns"]},
                                         critic.loss_agg_mode, self.cfg.data.max_response_length, critic, device)

        def loss_fn(output, batch):
            f = batch.token_fields
            vpreds = output.squeeze(-1).float()
            vf_loss, clipfrac = compute_value_loss(vpreds, f["returns"], f["values"], f["mask"],
                                                   critic.cliprange_value, weights=f["weights"])
            share = f["mask"].sum() / max(tokens, 1.0)
            return vf_loss, {"vf_loss": vf_loss.item(), "vf_clipfrac": (clipfrac * share).item(),
                             "vpred_mean": (vpreds * f["token_mean"]).sum().item()}

        return reduce_metrics(self.role.train_step(packed, loss_fn), device)
