"""The bundled synthetic task of the tiny CPU recipes: two-number addition in GSM8K's `#### answer` format.

`write_arithmetic(out_dir)` writes, in verl's row schema (data_source `synthetic/arithmetic`, scored by the
GSM8K rule):
- `train.parquet` / `test.parquet`: RL prompts; `extra_info.answer` is the right response.
- `sft.parquet`: warm-start data with right answers, stated in the graded format (`#### N`) only
  `sft_format_rate` of the time and as `= N` otherwise. A model fitted to it can add but earns the
  reward only when it happens to use the graded format: a weak policy whose reward RL must raise, as GSM8K
  rewards rise first when a small SFT model learns to end with `#### N`.
- `judge.parquet`: a judge's fine-tuning data (the tiny judge recipe, docs/judge.md): each train question with an
  answer, `JUDGE_PROMPT` filled as `reward.judge.prompt` fills it, and the verdict `Y` (the graded format and the
  right sum, what the rule rewards) or `N` (a wrong sum, or the `= N` format) in `extra_info.answer`.
"""

from __future__ import annotations

import random
from pathlib import Path

from megarl.data.preprocess import write_splits

DATA_SOURCE = "synthetic/arithmetic"
# The tiny judge recipe's reward.judge.prompt: the question, the answer and the reference (a judge guided by it: a
# tiny model learns to compare two numbers far sooner than to add them before comparing).
JUDGE_PROMPT = "{prompt}{response}|{ground_truth}?"
VERDICTS = ("Y", "N")  # its reward.judge.parse.yes and no


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
        "judge": judge_rows(train, random.Random(seed + 1)),
    }


def judge_rows(pairs: list[tuple[int, int]], rng: random.Random, right_copies: int = 3) -> list[dict]:
    """Per question: the graded right answer `right_copies` times (verdict Y); two graded wrong sums near the right one
    (a policy's slips), one anywhere in the task's range, a bare `####`, the right and a wrong sum as `= N` (verdict
    N). Shuffled."""
    verdicts, largest = [], 2 * max(max(pair) for pair in pairs)
    for a, b in pairs:
        right = a + b
        near = [w for w in range(max(right - 5, 0), right + 6) if w != right]
        anywhere = [w for w in range(largest + 1) if w != right]
        answers = [(response(right), True)] * right_copies
        answers += [(response(w), False) for w in [*rng.sample(near, 2), rng.choice(anywhere)]]
        answers += [("####", False), (response(right, False), False), (response(rng.choice(near), False), False)]
        verdicts += [(a, b, text, ok) for text, ok in answers]
    rng.shuffle(verdicts)
    return [{"data_source": DATA_SOURCE, "ability": "judge",
             "prompt": [{"role": "user", "content": JUDGE_PROMPT.format(prompt=f"{a}+{b}=", response=text,
                                                                          ground_truth=a + b)}],
             "reward_model": {"style": "rule", "ground_truth": VERDICTS[0] if ok else VERDICTS[1]},
             "extra_info": {"split": "judge", "index": i, "answer": VERDICTS[0] if ok else VERDICTS[1]}}
            for i, (a, b, text, ok) in enumerate(verdicts)]


def write_arithmetic(output_dir: str | Path, **options) -> dict[str, Path]:
    return write_splits(output_dir, arithmetic_splits(**options))


def corpus(max_operand: int = 19) -> list[str]:
    """Texts that cover the task's vocabulary, for a tokenizer made for it."""
    pairs = [(a, b) for a in range(max_operand + 1) for b in range(max_operand + 1)]
    return [f"{a}+{b}={response(a + b, graded)}" for a, b in pairs for graded in (True, False)]
