"""The RL prompt dataset over parquet files in verl's row schema, and a resumable batch loader."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import torch

if TYPE_CHECKING:  # the config's validators import this module
    from megarl.config.schema import DataConfig

logger = logging.getLogger(__name__)

TRUNCATIONS = ("error", "left", "right", "middle")
REQUIRED_COLUMNS = ("data_source", "reward_model")


class DataError(ValueError):
    """A data file or row cannot be used; the message names the file, the row and the fix."""


@dataclass(frozen=True)
class _RowRef:
    file: int
    row: int


class RLDataset:
    """Prompts tokenized through the tokenizer's chat template, checked against `max_prompt_length`.

    Overlong prompts are dropped when `filter_overlong_prompts`; otherwise `truncation` decides: error (name
    the row and its length), left (keep the end), right (keep the start) or middle (keep both ends).
    An item is the row's columns plus `prompt_ids` (token ids, unpadded) and `raw_prompt`.
    """

    @classmethod
    def from_config(cls, files: Sequence[str | Path], tokenizer, data: DataConfig,
                    tools: Sequence[dict] = ()) -> RLDataset:
        """The training or validation prompts of a recipe's `data` section; `tools`: the schemas of the tools the
        model may call (rollout.multi_turn), which the chat template shows it."""
        return cls(files, tokenizer, max_prompt_length=data.max_prompt_length, prompt_key=data.prompt_key,
                   filter_overlong_prompts=data.filter_overlong_prompts, truncation=data.truncation, tools=tools)

    def __init__(
        self,
        files: Sequence[str | Path],
        tokenizer,
        *,
        max_prompt_length: int,
        prompt_key: str = "prompt",
        filter_overlong_prompts: bool = False,
        truncation: str = "error",
        tools: Sequence[dict] = (),
    ):
        if truncation not in TRUNCATIONS:
            raise ValueError(f"truncation={truncation!r} is not one of {', '.join(TRUNCATIONS)}")
        if not files:
            raise DataError("no data files given: set data.train_files (and data.val_files) to parquet files")
        self.files = [Path(f).expanduser() for f in files]
        self.prompt_key = prompt_key
        read = [read_rl_file(f, prompt_key) for f in self.files]
        self.tables = [table for table, _ in read]
        self._refs: list[_RowRef] = []
        self._prompt_ids: list[list[int]] = []
        overlong = 0
        for file_index, (_, prompts) in enumerate(read):
            for row, prompt in enumerate(prompts):
                ids = encode_prompt(tokenizer, prompt, f"{self.files[file_index]} row {row}", tools)
                if len(ids) > max_prompt_length:
                    overlong += 1
                    if filter_overlong_prompts:
                        continue
                    if truncation == "error":
                        raise DataError(
                            f"{self.files[file_index]} row {row}: the prompt is {len(ids)} tokens, more than "
                            f"data.max_prompt_length={max_prompt_length}. Raise data.max_prompt_length, drop such "
                            "prompts with data.filter_overlong_prompts=true, or cut them with "
                            "data.truncation=left|right|middle"
                        )
                    ids = truncate(ids, max_prompt_length, truncation)
                self._refs.append(_RowRef(file_index, row))
                self._prompt_ids.append(ids)
        if overlong:
            total = sum(table.num_rows for table in self.tables)
            action = "dropped" if filter_overlong_prompts else f"truncated ({truncation})"
            logger.info("%d of %d prompts exceed %d tokens: %s", overlong, total, max_prompt_length, action)
        if not self._refs:
            raise DataError(
                f"no prompts left in {', '.join(map(str, self.files))} after dropping those longer than "
                f"data.max_prompt_length={max_prompt_length}"
            )

    def __len__(self) -> int:
        return len(self._refs)

    def __getitem__(self, index: int) -> dict[str, Any]:
        ref = self._refs[index]
        item = dict(self.tables[ref.file][ref.row])
        item["raw_prompt"] = item.pop(self.prompt_key)
        item["prompt_ids"] = self._prompt_ids[index]
        return item


def truncate(ids: list[int], max_length: int, mode: str) -> list[int]:
    if mode == "left":
        return ids[-max_length:]
    if mode == "right":
        return ids[:max_length]
    if mode == "middle":
        left = max_length // 2
        return ids[:left] + ids[len(ids) - (max_length - left) :]
    raise ValueError(f"cannot truncate with mode {mode!r}")


def encode_prompt(tokenizer, prompt, where: str, tools: Sequence[dict] = ()) -> list[int]:
    """Token ids of a text prompt, or of a chat (a list of {role, content}) through the chat template with the
    generation prompt (and the `tools` it may call): what the policy continues, in RL rollouts and in SFT alike."""
    check_prompt(prompt, where)
    if isinstance(prompt, str):
        ids = tokenizer(prompt)["input_ids"]
    elif not getattr(tokenizer, "chat_template", None):
        raise DataError(f"{where}: the prompt is a chat, but the tokenizer has no chat_template")
    else:
        text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False,
                                             tools=list(tools) or None)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise DataError(f"{where}: the prompt encodes to no tokens ({prompt!r:.120})")
    return ids


def check_prompt(prompt, where: str) -> None:
    """Raise DataError unless `prompt` is non-empty text or a non-empty list of {role, content} messages."""
    if isinstance(prompt, str):
        if not prompt:
            raise DataError(f"{where}: the prompt is empty text: give it a question, or drop the row")
        return
    if not (isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt)):
        raise DataError(f"{where}: the prompt must be text or a list of {{role, content}} messages, got {prompt!r:.120}")
    if not prompt:
        raise DataError(f"{where}: the prompt is an empty list of messages: give it at least one {{role, content}} "
                        "message, or drop the row")


def read_parquet(path: Path) -> pa.Table:
    if not path.is_file():
        raise DataError(f"data file {path} does not exist")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path} is not a readable parquet file: {e}") from e
    if table.num_rows == 0:
        raise DataError(f"{path} has no rows")
    try:
        table.validate(full=True)  # text that is not UTF-8 would fail later, naming no file or row
    except pa.ArrowInvalid as e:
        _name_undecodable(path, table)
        raise DataError(f"{path} is not a readable parquet file: {e}") from e
    return table


def _name_undecodable(path: Path, table: pa.Table) -> None:
    """Raise DataError naming the first row and column of `table` whose text does not decode as UTF-8."""
    for name in table.column_names:
        column = table[name]
        try:
            column.to_pylist()
            continue
        except UnicodeDecodeError:
            pass
        for row in range(len(column)):
            try:
                column[row].as_py()
            except UnicodeDecodeError as e:
                raise DataError(f"{path} row {row}: column {name!r} is not valid UTF-8 ({e.reason} at byte "
                                f"{e.start}): write the file's text as UTF-8") from None


def parquet_schema(path: Path) -> pa.Schema:
    """The schema of the parquet file at `path`, from its footer (the rows are not read)."""
    try:
        return pq.read_schema(path)
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path} is not a readable parquet file: {e}") from e


def read_rl_file(path: Path, prompt_key: str) -> tuple[datasets.Dataset, list]:
    """The RL parquet file at `path` and its prompts, every row's checked (`check_prompt`), or DataError naming the
    file and the row; `--dry-run` reads each data file through it too."""
    table = read_parquet(path)
    check_rl_columns(path, prompt_key)
    reward_type = table.schema.field("reward_model").type
    if not (pa.types.is_struct(reward_type) and reward_type.get_field_index("ground_truth") >= 0):
        raise DataError(f"{path}: column reward_model must be a struct with a ground_truth field, got {reward_type}")
    prompts = table[prompt_key].to_pylist()
    for row, prompt in enumerate(prompts):
        check_prompt(prompt, f"{path} row {row}")
    return datasets.Dataset(table), prompts


def check_rl_columns(path: Path, prompt_key: str) -> None:
    """Raise DataError unless the parquet file at `path` has the RL dataset's columns."""
    names = parquet_schema(path).names
    missing = [c for c in (prompt_key, *REQUIRED_COLUMNS) if c not in names]
    if missing:
        raise DataError(
            f"{path}: missing column(s) {missing}; it has {names}. Rows need verl's schema "
            f"({prompt_key}, data_source, reward_model.ground_truth); `megarl preprocess` writes it"
            + (", or set data.prompt_key to the prompt column" if prompt_key in missing else "")
        )


class PromptLoader:
    """Batches of `batch_size` dataset items in an order fixed by (seed, epoch), resumable mid-epoch.

    Iterating yields the rest of the current epoch, then moves to the next. `state_dict()` taken after a
    batch was consumed resumes at the following batch. A batch is a dict of lists, one entry per item field.
    """

    def __init__(self, dataset, batch_size: int, *, shuffle: bool = True, seed: int = 1, drop_last: bool = True):
        if batch_size < 1:
            raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
        if drop_last and len(dataset) < batch_size:
            raise DataError(f"a batch needs {batch_size} prompts but the dataset has only {len(dataset)}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.epoch = 0
        self.batch_in_epoch = 0

    def __len__(self) -> int:
        full, rest = divmod(len(self.dataset), self.batch_size)
        return full if self.drop_last or not rest else full + 1

    def _order(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(len(self.dataset)))
        generator = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(len(self.dataset), generator=generator).tolist()

    def __iter__(self) -> Iterator[dict[str, list]]:
        epoch = self.epoch
        order = self._order(epoch)
        while self.epoch == epoch:
            start = self.batch_in_epoch * self.batch_size
            items = [self.dataset[i] for i in order[start : start + self.batch_size]]
            # Advance before yielding: a state saved after the epoch's last batch resumes at the next epoch.
            self.batch_in_epoch += 1
            if self.batch_in_epoch == len(self):
                self.epoch, self.batch_in_epoch = epoch + 1, 0
            yield {key: [item[key] for item in items] for key in items[0]}

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state["seed"] != self.seed:
            raise ValueError(f"the saved loader used seed {state['seed']}, this one {self.seed}")
        self.epoch = state["epoch"]
        self.batch_in_epoch = state["batch_in_epoch"]
