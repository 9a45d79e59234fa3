"""Raw datasets → train/test parquet in verl's row schema.

Each row: data_source, prompt (a chat list), ability, reward_model {style, ground_truth}, extra_info
{split, index, answer, question}. Input is a jsonl/json/parquet file, a directory of them (the split is read
from each file name), or a HF dataset name (needs network).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import datasets

from megarl.registry import Registry
from megarl.rewards.math import last_boxed_only_string, remove_boxed

GSM8K_INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
BOXED_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
_GSM8K_ANSWER = re.compile(r"#### (\-?[0-9\.\,]+)")

PREPROCESSORS: Registry[Callable] = Registry("dataset kind")
SPLITS = ("train", "test", "validation", "val")
RAW_SUFFIXES = (".jsonl", ".json", ".parquet")
HUB_REPOS = {"gsm8k": "openai/gsm8k", "math": "HuggingFaceH4/MATH-500"}  # `--input gsm8k` is a hub shorthand
HUB_CONFIGS = {"openai/gsm8k": "main"}


class PreprocessError(ValueError):
    """The input cannot be turned into RL rows; the message names the file, row or field."""


def _row(data_source: str, question: str, instruction: str, ability: str, ground_truth: str, raw_answer: str,
         split: str, index: int) -> dict:
    content = f"{question} {instruction}" if instruction else question
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": content}],
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": split, "index": index, "answer": raw_answer, "question": question},
    }


def gsm8k_ground_truth(answer: str) -> str | None:
    """The number after `####` in a GSM8K reference answer, thousands separators removed."""
    match = _GSM8K_ANSWER.search(answer)
    return match.group(1).replace(",", "") if match else None


def boxed_ground_truth(solution: str) -> str | None:
    boxed = last_boxed_only_string(solution)
    return remove_boxed(boxed) if boxed else None


@PREPROCESSORS.register("gsm8k")
def gsm8k_example(example: dict, split: str, index: int, *, where: str) -> dict:
    _require(example, ("question", "answer"), where)
    truth = gsm8k_ground_truth(example["answer"])
    if truth is None:
        raise PreprocessError(f"{where}: answer has no '#### <number>' line: {example['answer'][-120:]!r}")
    return _row("openai/gsm8k", example["question"], GSM8K_INSTRUCTION, "math", truth, example["answer"], split, index)


@PREPROCESSORS.register("math")
def math_example(example: dict, split: str, index: int, *, where: str, data_source: str = "HuggingFaceH4/MATH-500",
                 question_key: str = "problem", solution_key: str = "solution",
                 instruction: str = BOXED_INSTRUCTION) -> dict:
    _require(example, (question_key,), where)
    solution = example.get(solution_key) or ""
    truth = boxed_ground_truth(solution) or example.get("answer")
    if not truth:
        raise PreprocessError(f"{where}: no \\boxed{{}} answer in {solution_key!r} and no 'answer' field")
    return _row(data_source, example[question_key], instruction, "math", str(truth), solution, split, index)


@PREPROCESSORS.register("custom")
def custom_example(example: dict, split: str, index: int, *, where: str, data_source: str = "math",
                   question_key: str | None = None, solution_key: str = "solution",
                   instruction: str = BOXED_INSTRUCTION) -> dict:
    if question_key is None:
        question_key = next((k for k in ("question", "problem", "prompt") if k in example), "question")
    return math_example(example, split, index, where=where, data_source=data_source, question_key=question_key,
                        solution_key=solution_key, instruction=instruction)


def _require(example: dict, keys: tuple[str, ...], where: str) -> None:
    missing = [k for k in keys if not isinstance(example.get(k), str)]
    if missing:
        raise PreprocessError(f"{where}: missing text field(s) {missing}; the row has {sorted(example)}")


def split_of(path: Path) -> str | None:
    """The split a file name names (train.jsonl, math500_test.jsonl, ...), or None."""
    for split in SPLITS:
        if re.search(rf"(^|[^a-z]){split}([^a-z]|$)", path.stem.lower()):
            return "test" if split in ("validation", "val") else split
    return None


def read_raw(source: str, split: str | None = None) -> dict[str, tuple[str, datasets.Dataset]]:
    """split → (where it came from, raw dataset) for a file, a directory of files, or a HF dataset name."""
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in RAW_SUFFIXES)
        found = {split_of(p): p for p in files if split_of(p)}
        if not found:
            raise PreprocessError(f"{path}: no {'/'.join(RAW_SUFFIXES)} file whose name says train or test")
        return {s: (str(p), _read_file(p)) for s, p in found.items()}
    if path.suffix in RAW_SUFFIXES or path.exists():
        if not path.is_file():
            raise PreprocessError(f"{path} does not exist")
        file_split = split or split_of(path)
        if file_split is None:
            raise PreprocessError(f"{path}: cannot tell the split from the name; pass --split train|test")
        return {file_split: (str(path), _read_file(path))}
    return _read_hub(source, split)


def _read_file(path: Path) -> datasets.Dataset:
    builder = "parquet" if path.suffix == ".parquet" else "json"
    try:
        return datasets.load_dataset(builder, data_files=str(path), split="train")
    except Exception as e:
        raise PreprocessError(f"{path}: cannot read it as {builder}: {e}") from e


def _read_hub(name: str, split: str | None) -> dict[str, tuple[str, datasets.Dataset]]:
    repo = HUB_REPOS.get(name, name)
    try:
        loaded = datasets.load_dataset(repo, HUB_CONFIGS.get(repo))
    except Exception as e:
        raise PreprocessError(
            f"{name!r} is not a file or directory, and loading it as a HF dataset failed ({type(e).__name__}: "
            f"{e}). Offline? Pass the path of the jsonl/parquet files instead."
        ) from e
    return {s: (f"{repo}[{s}]", ds) for s, ds in loaded.items() if split is None or s == split}


def preprocess(kind: str, source: str, output_dir: str | Path, split: str | None = None, **options) -> dict[str, Path]:
    """Convert `source` with the `kind` preprocessor; write `<output_dir>/<split>.parquet` for each split."""
    to_row = PREPROCESSORS.get(kind)
    written: dict[str, Path] = {}
    for split_name, (where, raw) in read_raw(source, split).items():
        rows = [
            to_row(example, split_name, i, where=f"{where} row {i}", **options) for i, example in enumerate(raw)
        ]
        if not rows:
            raise PreprocessError(f"{where} has no rows")
        written.update(write_splits(output_dir, {split_name: rows}))
    return written


def write_splits(output_dir: str | Path, splits: dict[str, list[dict]]) -> dict[str, Path]:
    """Each split's rows as `<output_dir>/<split>.parquet`."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for split, rows in splits.items():
        written[split] = output_dir / f"{split}.parquet"
        datasets.Dataset.from_list(rows).to_parquet(str(written[split]))
    return written
