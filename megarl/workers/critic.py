"""The critic role (PPO's GAE baseline): a megatron value model, its value pass and its clipped value-loss update."""

from __future__ import annotations

import torch

from megarl.algorithms import compute_value_loss
from megarl.columns import RETURNS, SEQUENCES, VALUES, stage
from megarl.models.roles import build_critic
from megarl.workers import TrainedWorker, join_mesh
from megarl.workers.actor import ActorWorker
from megarl.workers.sequences import response_values, sequences
from megarl.workers.inputs import CriticInputs
from megarl.workers.updates import pack_mini_batch, ppo_epochs, reduce_metrics
from parallel.batch import Batch
from parallel.dispatch import Collect, Dispatch, worker_method


class CriticWorker(TrainedWorker):
    def __init__(self, inputs: CriticInputs, beside: ActorWorker | None = None):
        """`beside`: the actor, when this role shares its processes (and so its GPUs' cached blocks)."""
        join_mesh(inputs.model)
        self.inputs = inputs
        self.model = build_critic(inputs.model.path, inputs.model.megatron, inputs.optim, inputs.total_steps,
                                  bf16=torch.cuda.is_available(), seed=inputs.model.seed,
                                  blocks=beside.model.blocks if beside else None)

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    @stage(reads=SEQUENCES, writes=(VALUES,))
    def compute_values(self, batch: Batch) -> Batch:
        """`values` [B, R]: the value of the state before each response token."""
        seqs = sequences(batch)
        groups = self.inputs.forward.split([len(s) for s in seqs])
        return Batch({VALUES: response_values(batch, self.model.values(seqs, groups))})

    @worker_method(Dispatch.DP_SPLIT, Collect.AGREED)
    @stage(reads=(*SEQUENCES, VALUES, RETURNS))
    def update_critic(self, batch: Batch) -> dict[str, float]:
        """Clipped value-loss epochs over mini-batches; needs `values` and `returns`. Returns verl's
        `critic/vf_loss`, `critic/vf_clipfrac`, `critic/vpred_mean`, `critic/grad_norm`, `critic/lr`."""
        with self.model.updating():
            return ppo_epochs(batch, self.inputs.update, self._update_mini_batch, "critic")

    def _update_mini_batch(self, part: Batch) -> dict[str, float]:
        device, cliprange = self.model.device, self.inputs.cliprange_value
        packed, tokens = pack_mini_batch(part, {VALUES: part[VALUES], RETURNS: part[RETURNS]},
                                         self.inputs.update, device, one_length=self.model.packs_to_one_length)

        def loss_fn(output, batch):
            f = batch.token_fields
            vpreds = output.squeeze(-1).float()
            vf_loss, clipfrac = compute_value_loss(vpreds, f[RETURNS], f[VALUES], f["mask"], cliprange,
                                                   weights=f["weights"])
            share = f["mask"].sum() / max(tokens, 1.0)
            return vf_loss, {"vf_loss": vf_loss, "vf_clipfrac": clipfrac * share,
                             "vpred_mean": (vpreds * f["token_mean"]).sum()}

        return reduce_metrics(self.model.train_step(packed, loss_fn))
