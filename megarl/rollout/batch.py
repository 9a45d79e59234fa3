"""The step's data from prompts to responses, as `Batch` columns with verl's names.

A prompt batch carries `prompt_ids` (token lists) and the dataset's fields, plus a `uid` per prompt. After
generation each prompt appears `n` times in a row (its group, for GRPO-style estimators) with `responses`
[B, R] (right-padded), `response_mask` [B, R], `rollout_log_probs` [B, R] (where the engine returned them:
rollout.calculate_log_probs) and `finish_reason`. Training-side columns (the model passes' inputs and outputs) are
megarl/workers/sequences.py's.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from megarl.columns import (AGENT_STATS, FINISH_REASON, PROMPT_IDS, RESPONSE_MASK, RESPONSES, REWARD_MODEL,
                            ROLLOUT_LOG_PROBS, ROUTED_EXPERTS, UID)
from megarl.rollout.base import Response
from parallel.batch import Batch



def ground_truths(batch: Batch) -> list[Any]:
    return [reward_model.get("ground_truth") for reward_model in batch[REWARD_MODEL]]


def rule_scored(ground_truth: Any, with_truth_only: bool) -> bool:
    """Whether the rule or custom reward scores a response: always, or only where it has a ground truth when a
    reward model scores too (`with_truth_only`)."""
    return not with_truth_only or ground_truth not in (None, "")


def prompt_batch(items: dict[str, list], first_uid: int = 0) -> Batch:
    """From a `PromptLoader` batch (each key: one value per prompt), with uids first_uid, first_uid + 1, ..."""
    count = len(items[PROMPT_IDS])
    return Batch(fields={**items, UID: [f"{first_uid + i}" for i in range(count)]})


def engine_log_probs(responses: Sequence[Response], width: int) -> torch.Tensor | None:
    """The responses' log-probs [B, width] (right-padded with 0), or None where the requests asked for none."""
    rows = [response.logprobs for response in responses]
    if all(row is None for row in rows):
        return None
    logprobs = torch.zeros(len(rows), width)
    for i, row in enumerate(rows):
        if row is None:
            raise ValueError("some responses carry the engine's log-probs and some do not: one batch asks alike")
        logprobs[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return logprobs


def with_responses(prompts: Batch, responses: Sequence[Sequence[Response]], width: int | None = None) -> Batch:
    """`prompts` repeated once per response (a prompt's responses adjacent), with the responses as columns
    padded to `width` (default: the longest response). Engines that fill one batch must agree on the width."""
    if len(responses) != len(prompts):
        raise ValueError(f"{len(responses)} response groups for {len(prompts)} prompts")
    n = {len(group) for group in responses}
    if len(n) != 1:
        raise ValueError(f"every prompt needs the same number of responses, got {sorted(n)}")
    flat = [r for group in responses for r in group]
    longest = max((len(r.token_ids) for r in flat), default=0)
    if width is None:
        width = longest
    elif longest > width:
        raise ValueError(f"a response of {longest} tokens does not fit the width {width}")
    tokens = torch.zeros(len(flat), width, dtype=torch.long)
    mask = torch.zeros(len(flat), width)
    for i, response in enumerate(flat):
        length = len(response.token_ids)
        tokens[i, :length] = torch.tensor(response.token_ids, dtype=torch.long)
        mask[i, :length] = 1.0 if response.loss_mask is None else torch.tensor(response.loss_mask, dtype=torch.float32)
    tensors = {RESPONSES: tokens, RESPONSE_MASK: mask}
    logprobs = engine_log_probs(flat, width)
    if logprobs is not None:
        tensors[ROLLOUT_LOG_PROBS] = logprobs
    fields: dict[str, list] = {FINISH_REASON: [r.finish_reason for r in flat]}
    if flat and flat[0].agent is not None:
        fields[AGENT_STATS] = [r.agent for r in flat]
    if flat and flat[0].routed_experts is not None:
        fields[ROUTED_EXPERTS] = [r.routed_experts for r in flat]
    return prompts.repeat(n.pop()).union(Batch(tensors, fields))
