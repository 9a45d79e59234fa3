"""The SFT role: the actor's megatron model (same mesh, same optimizer) trained on the negative log-likelihood
of response tokens, and exported as a HF checkpoint that RL recipes start from."""

from __future__ import annotations

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from transformers import AutoTokenizer

from megarl.algorithms import token_weights
from megarl.models.hf_files import copy_hf_metadata, write_hf_checkpoint
from megarl.models.logprobs import vocab_parallel_logprobs_and_entropy
from megarl.models.roles import build_actor
from megarl.workers import OneModelWorker, join_mesh
from megarl.workers.sequences import response_values, sequences
from megarl.workers.inputs import SFTInputs
from megarl.workers.updates import pack_groups, reduce_metrics
from parallel.batch import Batch
from parallel.dispatch import Collect, Dispatch, worker_method


class SFTWorker(OneModelWorker):
    def __init__(self, inputs: SFTInputs):
        join_mesh(inputs.model)
        self.inputs = inputs
        self.model = build_actor(inputs.model.path, inputs.model.megatron, inputs.optim, inputs.total_steps,
                                 bf16=torch.cuda.is_available())

    def _micro_batches(self, seqs: list[torch.Tensor]) -> list[list[int]]:
        return self.inputs.micro.split([len(s) for s in seqs])

    @worker_method(Dispatch.DP_SPLIT, Collect.AGREED)
    def train_batch(self, batch: Batch) -> dict[str, float]:
        """One optimizer step over the global batch (`prompt_ids`, `responses`, `response_mask`; this rank's
        part in micro-batches): the loss is the mean NLL over every response token of the global batch. Returns
        train/loss, train/grad_norm and train/lr, identical on every rank."""
        device = self.model.device
        mask = batch["response_mask"]
        tokens = mask.sum().to(device)
        dist.all_reduce(tokens, group=parallel_state.get_data_parallel_group())
        seqs = sequences(batch)
        packed = pack_groups(batch, seqs, {"weights": token_weights(mask, "token-mean", tokens.item())},
                             self._micro_batches(seqs), device, one_length=self.model.packs_to_one_length)

        def loss_fn(logits, micro):
            logprobs, _ = vocab_parallel_logprobs_and_entropy(logits, micro.labels, with_entropy=False)
            loss = -(logprobs * micro.token_fields["weights"]).sum()
            return loss, {"loss": loss}

        metrics = reduce_metrics(self.model.train_step(packed, loss_fn))
        return {f"train/{key}": value for key, value in metrics.items()}

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    def eval_batch(self, batch: Batch) -> dict[str, float]:
        """The summed NLL of this rank's response tokens and their count (no update)."""
        seqs = sequences(batch)
        logprobs = self.model.logprobs(seqs, self._micro_batches(seqs))["logprobs"]
        mask = batch["response_mask"]
        return {"nll": -(response_values(batch, logprobs) * mask).sum().item(), "tokens": mask.sum().item()}

    @worker_method(Dispatch.ONE_TO_ALL, Collect.RANK_ZERO)
    def save_hf(self, out_dir: str) -> str:
        """Write the trained weights as a HF checkpoint in `out_dir` (config and tokenizer files beside them).
        Every rank takes part in gathering the weights; rank 0 writes."""
        tensors = self.model.export_hf()
        if dist.get_rank() == 0:
            write_hf_checkpoint(tensors, out_dir)
            copy_hf_metadata(self.inputs.model.directory, out_dir)
            if self.inputs.tokenizer_path:
                tokenizer = AutoTokenizer.from_pretrained(self.inputs.tokenizer_path,
                                                          trust_remote_code=self.inputs.trust_remote_code)
                tokenizer.save_pretrained(out_dir)
        else:
            for _ in tensors:
                pass
        dist.barrier()
        return out_dir
