"""The reward-model role: a frozen value-head model (`megarl rm`'s output) that scores each prompt + response at its
last token. Colocated, it runs in the actor's processes, its weights in host memory between its passes; in a pool of
its own its weights stay on its GPUs. A reward model that reads text differently from the policy scores the
re-encoded prompt + response (megarl/data/retemplate.py)."""

from __future__ import annotations

import torch

from megarl.columns import PROMPT_IDS, RAW_PROMPT, RM_SCORES, SEQUENCES, stage
from megarl.models.roles import build_reward_model
from megarl.workers import join_mesh
from megarl.workers.actor import ActorWorker
from megarl.workers.sequences import sequences
from megarl.workers.inputs import RewardModelInputs
from parallel.batch import Batch
from parallel.dispatch import Collect, Dispatch, worker_method
from parallel.worker import Worker


class RewardModelWorker(Worker):
    def __init__(self, inputs: RewardModelInputs, beside: ActorWorker | None = None):
        """`beside`: the actor, when this role shares its processes (and so its GPUs' cached blocks)."""
        join_mesh(inputs.model)
        self.inputs = inputs
        self.model = build_reward_model(inputs.model.path, inputs.model.megatron, bf16=torch.cuda.is_available(),
                                        resident=inputs.resident, blocks=beside.model.blocks if beside else None)
        self.retemplate = inputs.retemplate.build(inputs.model.directory) if inputs.retemplate else None

    @worker_method(Dispatch.DP_SPLIT, Collect.DP_LEADERS)
    @stage(reads=SEQUENCES, writes=(RM_SCORES,), reads_if_present=(RAW_PROMPT,))
    def compute_rm_score(self, batch: Batch) -> Batch:
        """`rm_scores` [B]: the model's score of each prompt + response."""
        seqs = sequences(batch)
        if self.retemplate is not None:
            responses = [seq[len(prompt):] for seq, prompt in zip(seqs, batch[PROMPT_IDS])]
            seqs = self.retemplate(batch[RAW_PROMPT], responses)
        groups = self.inputs.forward.split([len(s) for s in seqs])
        return Batch({RM_SCORES: self.model.sequence_scores(seqs, groups).float().cpu()})
