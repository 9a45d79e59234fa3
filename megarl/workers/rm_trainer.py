"""The reward-model role: the critic's megatron value model trained with the ranking loss on each sequence's
score (the value head at its last token, eos), and exported as a HF sequence-classification checkpoint.

A ranking is one batch element: its K sequences share a micro-batch, so the loss sees all K scores. Under context
parallelism a sequence's last token is on one CP rank; the scores are summed over the CP group with an all-reduce
whose backward is an all-reduce too, so every CP rank computes the whole loss and sends each score's gradient back
to the rank whose token produced it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_autograd
from megatron.core import parallel_state
from transformers import AutoTokenizer

from megarl.algorithms import ranking_terms
from megarl.models.packing import PackedBatch, pack_micro_batches, to_device
from megarl.models.roles import build_critic
from megarl.models.seq_cls_export import write_sequence_classifier
from megarl.workers import OneModelWorker, join_mesh
from megarl.workers.inputs import RMInputs
from megarl.workers.updates import reduce_metrics
from parallel.batch import Batch
from parallel.dispatch import Collect, Dispatch, worker_method


@dataclass(frozen=True)
class RankedMicroBatches:
    """This rank's rankings as sequences (each ranking's K, best first, one ranking after another) and the
    micro-batches over them: sequence indices, and the K and the weight of each ranking a micro-batch holds."""

    sequences: list[torch.Tensor]
    groups: list[list[int]]
    sizes: list[list[int]]
    weights: list[torch.Tensor]


class RMTrainerWorker(OneModelWorker):
    def __init__(self, inputs: RMInputs):
        join_mesh(inputs.model)
        self.inputs = inputs
        self.model = build_critic(inputs.model.path, inputs.model.megatron, inputs.optim, inputs.total_steps,
                                  bf16=torch.cuda.is_available(), seed=inputs.model.seed)

    def _micro_batches(self, batch: Batch) -> RankedMicroBatches:
        """Micro-batches of whole rankings: so many rankings each, or (use_dynamic_bsz) up to a token budget."""
        sequences: list[torch.Tensor] = []
        ranges: list[range] = []
        for prompt, responses in zip(batch["prompt_ids"], batch["response_ids"]):
            ranges.append(range(len(sequences), len(sequences) + len(responses)))
            sequences += [torch.tensor(prompt + response, dtype=torch.long) for response in responses]
        lengths = [sum(len(sequences[i]) for i in indices) for indices in ranges]
        rankings = self.inputs.micro.split(lengths)
        return RankedMicroBatches(sequences, [[i for r in group for i in ranges[r]] for group in rankings],
                                  [[len(ranges[r]) for r in group] for group in rankings],
                                  [batch["weight"][group].float() for group in rankings])

    @worker_method(Dispatch.DP_SPLIT, Collect.AGREED)
    def train_batch(self, batch: Batch) -> dict[str, float]:
        """One optimizer step over the global batch of rankings (`prompt_ids`, `response_ids`, `weight`; this
        rank's part in micro-batches): the loss is the mean ranking loss over the batch's rankings. Returns
        rm/loss, rm/accuracy (pairs in order), rm/chosen_reward and rm/rejected_reward (the better and the worse
        response's mean score over pairs), rm/grad_norm and rm/lr, identical on every rank."""
        device, margin = self.model.device, self.inputs.margin
        count = batch["weight"].sum().to(device)
        dist.all_reduce(count, group=parallel_state.get_data_parallel_group())
        plan = self._micro_batches(batch)
        packed = pack_micro_batches(plan.sequences, plan.groups, device, one_length=self.model.packs_to_one_length)
        cp = parallel_state.get_context_parallel_world_size()
        # Each CP rank computes the whole loss: its share is 1/cp of it. What the loss reads per micro-batch is on the
        # device before the schedule starts: a blocking copy inside it would wait for the forward to finish.
        rankings = {id(micro): (sizes, to_device(weights, device) / (count * cp),
                                tuple(to_device(t, device) for t in last_token_slots(micro)))
                    for micro, sizes, weights in zip(packed, plan.sizes, plan.weights)}

        def loss_fn(output, micro):
            sizes, shares, slots = rankings[id(micro)]
            terms = ranking_terms(last_token_scores(output, micro, slots), sizes, margin)
            loss = (terms.loss * shares).sum()
            return loss, {name: (value.detach() * shares).sum() for name, value in terms._asdict().items()}

        metrics = reduce_metrics(self.model.train_step(packed, loss_fn))
        return {f"rm/{key}": value for key, value in metrics.items()}

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    def eval_batch(self, batch: Batch) -> dict[str, float]:
        """This rank's rankings' summed loss and accuracy, and their count (padding rankings weigh 0; no update)."""
        plan = self._micro_batches(batch)
        # In the batch's order (token-budget micro-batches reorder rankings; the scores come back in this order).
        scores = self.model.sequence_scores(plan.sequences, plan.groups).float().cpu()
        terms = ranking_terms(scores, [len(responses) for responses in batch["response_ids"]], self.inputs.margin)
        weights = batch["weight"].float()
        return {"loss": (terms.loss * weights).sum().item(), "accuracy": (terms.accuracy * weights).sum().item(),
                "rankings": weights.sum().item()}

    @worker_method(Dispatch.ONE_TO_ALL, Collect.RANK_ZERO)
    def save_hf(self, out_dir: str) -> str:
        """Write the trained model as a HF sequence-classification checkpoint in `out_dir` (config and tokenizer
        beside the weights). Every rank takes part in gathering the weights; rank 0 writes."""
        tensors = self.model.export_hf()
        if dist.get_rank() == 0:
            tokenizer = AutoTokenizer.from_pretrained(self.inputs.tokenizer_path or self.inputs.model.path,
                                                      trust_remote_code=self.inputs.trust_remote_code)
            write_sequence_classifier(tensors, out_dir, self.inputs.model.directory, tokenizer)
        else:
            for _ in tensors:
                pass
        dist.barrier()
        return out_dir


def last_token_scores(output: torch.Tensor, micro: PackedBatch, slots: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """[samples]: the value head's output ([1, local tokens, 1]) at each sample's last token, on every CP rank;
    `slots` are `last_token_slots(micro)` on the output's device."""
    values = output.squeeze(-1)[0].float()
    samples, positions = slots
    scores = values.new_zeros(len(micro.lengths)).index_add(0, samples, values[positions])
    if micro.cp_size > 1:
        scores = dist_autograd.all_reduce(scores, group=parallel_state.get_context_parallel_group())
    return scores


def last_token_slots(micro: PackedBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The samples whose last token this CP rank holds, and where in its local tokens: rank r holds chunks r and
    2·cp−1−r of each sample padded to 2·cp equal chunks (megarl/models/packing.py)."""
    samples, positions, start = [], [], 0
    for index, (length, padded) in enumerate(zip(micro.lengths, micro.padded_lengths)):
        local = padded // micro.cp_size
        if micro.cp_size == 1:
            samples.append(index)
            positions.append(start + length - 1)
        else:
            chunk = local // 2
            which, offset = divmod(length - 1, chunk)
            held = {micro.cp_rank: 0, 2 * micro.cp_size - 1 - micro.cp_rank: chunk}
            if which in held:
                samples.append(index)
                positions.append(start + held[which] + offset)
        start += local
    return torch.tensor(samples, dtype=torch.long), torch.tensor(positions, dtype=torch.long)
