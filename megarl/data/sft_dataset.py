"""The SFT dataset: (prompt, response) pairs from parquet files, tokenized once, and their batches.

The prompt is encoded exactly as an RL prompt (`encode_prompt`: a chat through the chat template with the
generation prompt), so the model learns to continue what it will be given in RL; the response is the text after
it, plus the tokenizer's eos token, and only its tokens carry loss.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

import pyarrow as pa
import torch

from megarl.data.dataset import TRUNCATIONS, DataError, encode_prompt, parquet_schema, read_parquet
from parallel.batch import Batch

logger = logging.getLogger(__name__)

# No "middle": cutting out the middle of prompt + response would join the prompt's start to the response's end,
# and the model would learn to answer with the tail of an answer.
SFT_TRUNCATIONS = tuple(mode for mode in TRUNCATIONS if mode != "middle")


class SFTDataset:
    """Items `{"prompt_ids", "response_ids"}` (token lists; the response ends with eos), at most `max_length`
    tokens together. Longer samples are an error, or cut: `left` keeps the end (the prompt's start goes first),
    `right` keeps the start (the response's end goes, eos included). `prompt_key` and `response_key` are column
    names or dotted paths into struct columns (`extra_info.answer`); `prompt_key` None reads plain text from
    `response_key`, whose first token then stands for the prompt. `config_keys` name the two keys in errors."""

    def __init__(self, files: Sequence[str | Path], tokenizer, *, prompt_key: str | None, response_key: str,
                 max_length: int, truncation: str = "error",
                 config_keys: tuple[str, str] = ("data.prompt_key", "data.response_key")):
        if truncation not in SFT_TRUNCATIONS:
            raise ValueError(f"truncation={truncation!r} is not one of {', '.join(SFT_TRUNCATIONS)}")
        if not files:
            raise DataError("no data files given: set data.train_files (and data.val_files) to parquet files")
        if tokenizer.eos_token_id is None:
            raise DataError("the tokenizer has no eos token to end responses with: set model.tokenizer_path to one "
                            "that has")
        self.tokenizer, self.response_key = tokenizer, response_key
        self.prompt_ids: list[list[int]] = []
        self.response_ids: list[list[int]] = []
        truncated = 0
        for file in (Path(f).expanduser() for f in files):
            table = read_parquet(file)
            responses = column(table, response_key, config_keys[1], file)
            prompts = column(table, prompt_key, config_keys[0], file) if prompt_key else [None] * len(responses)
            for row, (prompt, response) in enumerate(zip(prompts, responses)):
                where = f"{file} row {row}"
                prompt_ids, response_ids = self._encode(prompt, response, where)
                if len(prompt_ids) + len(response_ids) > max_length:
                    truncated += 1
                    prompt_ids, response_ids = _truncate(prompt_ids, response_ids, max_length, truncation, where)
                self.prompt_ids.append(prompt_ids)
                self.response_ids.append(response_ids)
        if truncated:
            logger.info("%d of %d samples exceed %d tokens: truncated (%s)", truncated, len(self), max_length,
                        truncation)

    def _encode(self, prompt, response, where: str) -> tuple[list[int], list[int]]:
        if not isinstance(response, str):
            raise DataError(f"{where}: the response ({self.response_key}) must be text, got {response!r:.120}")
        text_ids = self.tokenizer(response, add_special_tokens=False)["input_ids"]
        if prompt is None:  # plain text: its first token conditions the rest
            if not text_ids:
                raise DataError(f"{where}: the text ({self.response_key}) is empty")
            prompt_ids, text_ids = text_ids[:1], text_ids[1:]
        else:
            prompt_ids = encode_prompt(self.tokenizer, prompt, where)
        return prompt_ids, text_ids + [self.tokenizer.eos_token_id]

    def __len__(self) -> int:
        return len(self.prompt_ids)

    def __getitem__(self, index: int) -> dict[str, list[int]]:
        return {"prompt_ids": self.prompt_ids[index], "response_ids": self.response_ids[index]}


def check_column(schema: pa.Schema, key: str, config_key: str, file: Path) -> None:
    """Raise DataError unless `key` (a column, or a dotted path into struct columns) is in `schema`."""
    first, *fields = key.split(".")
    if first not in schema.names:
        raise DataError(f"{file}: no column {first!r} for {config_key}={key}; it has {schema.names}. "
                        f"Set {config_key} to the column (a dotted path reaches into struct columns)")
    kind, path = schema.field(first).type, first
    for name in fields:
        if not (pa.types.is_struct(kind) and kind.get_field_index(name) >= 0):
            have = [kind.field(i).name for i in range(kind.num_fields)] if pa.types.is_struct(kind) else []
            raise DataError(f"{file}: {path} has no field {name!r} for {config_key}={key}"
                            + (f"; its fields are {have}" if have else f"; it is {kind}, not a struct"))
        kind, path = kind.field(name).type, f"{path}.{name}"


def check_sft_columns(path: Path, prompt_key: str, response_key: str) -> None:
    """Raise DataError unless the parquet file at `path` has the SFT dataset's prompt and response."""
    schema = parquet_schema(path)
    check_column(schema, prompt_key, "data.prompt_key", path)
    check_column(schema, response_key, "data.response_key", path)


def column(table: pa.Table, key: str, config_key: str, file: Path) -> list[Any]:
    """The values at `key` (a column, or a dotted path into struct columns) of every row."""
    check_column(table.schema, key, config_key, file)
    first, *fields = key.split(".")
    values = table.column(first).to_pylist()
    for name in fields:
        values = [value[name] if value is not None else None for value in values]
    return values


def _truncate(prompt: list[int], response: list[int], max_length: int, mode: str,
              where: str) -> tuple[list[int], list[int]]:
    total = len(prompt) + len(response)
    if mode == "error":
        raise DataError(
            f"{where}: prompt + response + eos is {total} tokens, more than data.max_length={max_length}. Raise "
            "data.max_length, or cut such samples with data.truncation=left|right"
        )
    if mode == "right":
        if len(prompt) >= max_length:
            raise DataError(f"{where}: the prompt alone is {len(prompt)} tokens, so data.truncation=right at "
                            f"data.max_length={max_length} leaves no response to train on: raise data.max_length")
        return prompt, response[: max_length - len(prompt)]
    kept = (prompt + response)[-max_length:]
    # Nothing predicts a sequence's first token, so it counts as prompt even when the prompt was cut away.
    prompt_length = max(1, len(prompt) - (total - max_length))
    return kept[:prompt_length], kept[prompt_length:]


def sft_batch(items: dict[str, list], multiple_of: int = 1) -> Batch:
    """A loader batch (`prompt_ids`, `response_ids`: one list per sample) → `prompt_ids` and right-padded
    `responses` with their `response_mask`, the columns the model passes read (`rollout.batch.sequences`).
    Rows with an empty response (no loss, no tokens) pad it to a multiple of `multiple_of` samples, so that
    a last, smaller evaluation batch still splits over the data-parallel ranks."""
    prompts, responses = list(items["prompt_ids"]), list(items["response_ids"])
    padding = -len(prompts) % multiple_of
    prompts += [prompts[0]] * padding
    responses += [[]] * padding
    width = max(len(r) for r in responses)
    tokens = torch.zeros(len(responses), width, dtype=torch.long)
    mask = torch.zeros(len(responses), width)
    for i, response in enumerate(responses):
        tokens[i, : len(response)] = torch.tensor(response, dtype=torch.long)
        mask[i, : len(response)] = 1.0
    return Batch({"responses": tokens, "response_mask": mask}, {"prompt_ids": prompts})
