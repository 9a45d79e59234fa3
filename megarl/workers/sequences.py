"""Between the step's response columns ([B, R] tensors aligned with `responses`, zero past each response's end)
and the model passes' per-sequence tensors (each sample's prompt + response, unpadded; position t is about token
t + 1, as megarl/models/forward.py returns log-probs and values and as packed token fields are laid out)."""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from megarl.columns import PROMPT_IDS, REF_LOG_PROB, RESPONSES, RESPONSE_MASK, response_lengths
from parallel.batch import Batch


def sequences(batch: Batch) -> list[torch.Tensor]:
    """Each sample's prompt + response tokens, unpadded."""
    lengths = response_lengths(batch[RESPONSE_MASK]).tolist()
    return [torch.cat([torch.as_tensor(prompt, dtype=torch.long), response[:length]])
            for prompt, response, length in zip(batch[PROMPT_IDS], batch[RESPONSES], lengths)]


def response_values(batch: Batch, per_sequence: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-sequence values of a model pass → [B, R] aligned with `responses`, zero past each response's end."""
    out = torch.zeros_like(batch[RESPONSE_MASK])
    lengths = response_lengths(batch[RESPONSE_MASK]).tolist()
    pieces = [values[len(prompt) - 1 : len(prompt) - 1 + length]
              for prompt, values, length in zip(batch[PROMPT_IDS], per_sequence, lengths)]
    if pieces:  # one device→host copy for the pass: each copy waits for the GPU
        for i, piece in enumerate(torch.cat(pieces).float().cpu().split(lengths[: len(pieces)])):
            out[i, : len(piece)] = piece
    return out


def reference_columns(batch: Batch, split: Callable, logprobs: Callable) -> Batch:
    """`ref_log_prob` [B, R]: `logprobs(sequences, micro_batches)` of the reference policy, micro-batched by
    `split` (a `MicroBatching.split`)."""
    seqs = sequences(batch)
    per_sequence = logprobs(seqs, split([len(s) for s in seqs]))["logprobs"]
    return Batch({REF_LOG_PROB: response_values(batch, per_sequence)})


def at_next_token_positions(batch: Batch, values: torch.Tensor) -> list[torch.Tensor]:
    """[B, R] response values → per sample, a tensor over next-token positions (length L − 1), zero on the
    prompt: the inverse of `response_values`, as `pack_sequences` takes token fields."""
    lengths = response_lengths(batch[RESPONSE_MASK]).tolist()
    out = []
    for prompt, row, length in zip(batch[PROMPT_IDS], values, lengths):
        field = torch.zeros(len(prompt) + length - 1, dtype=torch.float32)
        field[len(prompt) - 1 :] = row[:length].float()
        out.append(field)
    return out
