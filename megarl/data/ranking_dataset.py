"""The reward model's dataset: rankings of responses to a prompt from parquet files, tokenized once, and their
batches.

A row ranks K ≥ 2 responses, best first: a list column (`data.responses_key`), or a preference pair (columns
`data.chosen_key` and `data.rejected_key`, a ranking of two). The prompt is encoded exactly as an RL prompt
(`encode_prompt`: a chat through the chat template with the generation prompt); each response is the text after
it plus the tokenizer's eos token, as a policy's response ends, and the model scores the sequence there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pyarrow as pa
import torch

from megarl.data.dataset import DataError, encode_prompt, parquet_schema, read_parquet
from megarl.data.sft_dataset import check_column, column
from parallel.batch import Batch


@dataclass(frozen=True)
class RankingColumns:
    """Where a row's prompt and ranked responses are: column names, or dotted paths into struct columns."""

    prompt: str = "prompt"
    chosen: str = "chosen"
    rejected: str = "rejected"
    responses: str = "responses"

    @classmethod
    def of(cls, data) -> RankingColumns:
        """From a reward-model recipe's `data` section."""
        return cls(data.prompt_key, data.chosen_key, data.rejected_key, data.responses_key)


class RankingDataset:
    """Items `{"prompt_ids", "response_ids"}`: the prompt's tokens and the K responses' (best first, each ending
    with eos). A sequence (prompt + response + eos) longer than `max_length` is an error naming its row: cutting
    it would cut the eos the score is read at, or the text that decides the ranking."""

    def __init__(self, files: Sequence[str | Path], tokenizer, columns: RankingColumns, max_length: int):
        if not files:
            raise DataError("no data files given: set data.train_files (and data.val_files) to parquet files")
        if tokenizer.eos_token_id is None:
            raise DataError("the tokenizer has no eos token to end responses with: set model.tokenizer_path to one "
                            "that has")
        self.tokenizer, self.columns, self.max_length = tokenizer, columns, max_length
        self.prompt_ids: list[list[int]] = []
        self.response_ids: list[list[list[int]]] = []
        for file in (Path(f).expanduser() for f in files):
            table = read_parquet(file)
            prompts = column(table, columns.prompt, "data.prompt_key", file)
            labels, rankings = ranked_responses(table, columns, file)
            for row, (prompt, responses) in enumerate(zip(prompts, rankings)):
                self._add(prompt, responses, labels, f"{file} row {row}")

    def _add(self, prompt, responses, labels: Labels, where: str) -> None:
        check_ranking(responses, labels, where)
        prompt_ids = encode_prompt(self.tokenizer, prompt, where)
        response_ids = [self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.tokenizer.eos_token_id]
                        for text in responses]
        longest = max(range(len(response_ids)), key=lambda i: len(response_ids[i]))
        total = len(prompt_ids) + len(response_ids[longest])
        if total > self.max_length:
            raise DataError(f"{where}: prompt + {labels(longest)} + eos is {total} tokens, more than "
                            f"data.max_length={self.max_length}. Raise data.max_length, or drop the row")
        self.prompt_ids.append(prompt_ids)
        self.response_ids.append(response_ids)

    def __len__(self) -> int:
        return len(self.prompt_ids)

    def __getitem__(self, index: int) -> dict[str, list]:
        return {"prompt_ids": self.prompt_ids[index], "response_ids": self.response_ids[index]}


class Labels:
    """How an error names the i-th response of a row: by its column (a pair) or by its place in the list."""

    def __init__(self, columns: RankingColumns, pairs: bool):
        self.columns, self.pairs = columns, pairs

    def __call__(self, index: int) -> str:
        if self.pairs:
            return (self.columns.chosen, self.columns.rejected)[index]
        return f"{self.columns.responses}[{index}]"


def check_ranking(responses, labels: Labels, where: str) -> None:
    """Raise DataError unless `responses` is a list of at least two different texts (after stripping whitespace:
    the same answer twice is a tie, which a ranking cannot order)."""
    if not isinstance(responses, list) or len(responses) < 2:
        count = f"{len(responses)} response(s)" if isinstance(responses, list) else f"{responses!r:.80}"
        raise DataError(f"{where}: {labels.columns.responses} holds {count}; a ranking needs a list of at least 2 "
                        "responses, best first. Add responses, or drop the row")
    first_at: dict[str, int] = {}
    for index, text in enumerate(responses):
        if not isinstance(text, str):
            raise DataError(f"{where}: {labels(index)} must be text, got {text!r:.80}")
        if text.strip() in first_at:
            raise DataError(f"{where}: {labels(first_at[text.strip()])} and {labels(index)} are the same response "
                            f"({text.strip()!r:.80}), a tie a ranking cannot order. Keep one of them (drop the row "
                            "if no two different responses are left)")
        first_at[text.strip()] = index


def ranked_responses(table: pa.Table, columns: RankingColumns, file: Path) -> tuple[Labels, list]:
    """Each row's responses, best first: the responses list, or [chosen, rejected]."""
    if has_column(table.schema, columns.responses):
        return Labels(columns, pairs=False), column(table, columns.responses, "data.responses_key", file)
    check_ranking_shape(table.schema, columns, file)
    chosen = column(table, columns.chosen, "data.chosen_key", file)
    rejected = column(table, columns.rejected, "data.rejected_key", file)
    return Labels(columns, pairs=True), [[c, r] for c, r in zip(chosen, rejected)]


def has_column(schema: pa.Schema, key: str) -> bool:
    try:
        check_column(schema, key, "", Path())
    except DataError:
        return False
    return True


def check_ranking_shape(schema: pa.Schema, columns: RankingColumns, file: Path) -> None:
    """Raise DataError unless `schema` has a responses list, or both columns of a preference pair."""
    if has_column(schema, columns.responses) or (has_column(schema, columns.chosen)
                                                  and has_column(schema, columns.rejected)):
        return
    raise DataError(f"{file}: no ranked responses: rows need a column {columns.responses!r} (a list of responses, "
                    f"best first) or the columns {columns.chosen!r} and {columns.rejected!r} (a preference pair); "
                    f"it has {schema.names}. Set data.responses_key, or data.chosen_key and data.rejected_key")


def check_ranking_file(path: Path, columns: RankingColumns) -> None:
    """Raise DataError unless the parquet file at `path` has a prompt and ranked responses, each row's a ranking
    (`check_ranking`): what a dry run can tell without the tokenizer."""
    schema = parquet_schema(path)
    check_column(schema, columns.prompt, "data.prompt_key", path)
    check_ranking_shape(schema, columns, path)
    labels, rankings = ranked_responses(read_parquet(path), columns, path)
    for row, responses in enumerate(rankings):
        check_ranking(responses, labels, f"{path} row {row}")


def ranking_batch(items: dict[str, list], multiple_of: int = 1) -> Batch:
    """A loader batch of rankings → one Batch row per ranking (`prompt_ids`, `response_ids`: its K responses) and
    `weight` (1; 0 for the copies of the first ranking that pad a last, smaller evaluation batch to a multiple of
    `multiple_of` rankings, so that it splits over the data-parallel ranks)."""
    prompts, responses = list(items["prompt_ids"]), list(items["response_ids"])
    padding = -len(prompts) % multiple_of
    weight = torch.cat([torch.ones(len(prompts)), torch.zeros(padding)])
    return Batch({"weight": weight}, {"prompt_ids": prompts + [prompts[0]] * padding,
                                      "response_ids": responses + [responses[0]] * padding})
