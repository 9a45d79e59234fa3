"""The bundled synthetic task of the tiny CPU recipes: two-number addition in GSM8K's `#### answer` format.

`write_arithmetic(out_dir)` writes, in verl's row schema (data_source `synthetic/arithmetic`, scored by the
GSM8K rule):
- `train.parquet` / `test.parquet`: RL prompts; `extra_info.answer` is the right response.
- `sft.parquet`: warm-start data with right answers, stated in the graded format (`#### N`) only
  `sft_format_rate` of the time and as `= N` otherwise. A model fitted to it can add but earns the
  reward only when it happens to use the graded format: a weak policy whose reward RL must raise, as GSM8K
  rewards rise first when a small SFT model learns to end with `#### N`.
"""

from __future__ import annotations

import random
from pathlib import Path

from megarl.data.preprocess import write_splits

DATA_SOURCE = "synthetic/arithmetic"


def response(answer: int, graded_format: bool = True) -> str:
    return f"#### {answer}" if graded_format else f"= {answer}"


def _row(a: int, b: int, split: str, index: int, graded_format: bool = True) -> dict:
    question = f"{a}+{b}="
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(a + b)},
        "extra_info": {"split": split, "index": index, "question": question,
                       "answer": response(a + b, graded_format)},
    }


def arithmetic_splits(max_operand: int = 19, test_fraction: float = 0.2, sft_copies: int = 4,
                      sft_format_rate: float = 0.2, seed: int = 0) -> dict[str, list[dict]]:
    """Every pair (a, b) with 0 ≤ a, b ≤ max_operand, shuffled into train and test; `sft_copies` copies of each
    train pair for the warm start, each in the graded format with probability `sft_format_rate`."""
    rng = random.Random(seed)
    pairs = [(a, b) for a in range(max_operand + 1) for b in range(max_operand + 1)]
    rng.shuffle(pairs)
    n_test = round(len(pairs) * test_fraction)
    test, train = pairs[:n_test], pairs[n_test:]
    sft = []
    for a, b in train * sft_copies:
        sft.append((a, b, rng.random() < sft_format_rate))
    rng.shuffle(sft)
    return {
        "train": [_row(a, b, "train", i) for i, (a, b) in enumerate(train)],
        "test": [_row(a, b, "test", i) for i, (a, b) in enumerate(test)],
        "sft": [_row(a, b, "sft", i, graded) for i, (a, b, graded) in enumerate(sft)],
    }


def write_arithmetic(output_dir: str | Path, **options) -> dict[str, Path]:
    return write_splits(output_dir, arithmetic_splits(**options))


def corpus(max_operand: int = 19) -> list[str]:
    """Texts that cover the task's vocabulary, for a tokenizer made for it."""
    pairs = [(a, b) for a in range(max_operand + 1) for b in range(max_operand + 1)]
    return [f"{a}+{b}={response(a + b, graded)}" for a, b in pairs for graded in (True, False)]
