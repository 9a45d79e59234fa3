"""The bundled tool-use task of `launch/tiny_cpu.sh tools`: 4-digit products of two 2-digit numbers, which the tiny
model cannot work out in its head but can get from the `python` tool, in GSM8K's `#### answer` format. (Every answer
has four digits: the tiny model copies the tool's result into its answer reliably only at one length.)

`write_products(out_dir)` writes, in verl's row schema (data_source `synthetic/products`, scored by the GSM8K rule):
- `train.parquet` / `test.parquet`: RL prompts (`37*58=`).
- `sft.parquet`: warm-start demonstrations, a multi-turn text in `extra_info.answer`: with probability
  `tool_rate` a call of the python tool, its result and the answer; otherwise the answer alone, stated at once. A
  model fitted to it answers right mostly when it calls the tool, and calls it about `tool_rate` of the time: RL must
  raise the share of calls to raise the reward.

The tiny model's tokenizer for it (`megarl init-model --shape tiny --task products`) has the hermes call markers as
special tokens and `CHAT_TEMPLATE`: bare turns, a tool's result as `<tool_response>...</tool_response>`. A call is
36 tokens with its result and the answer (Qwen2's pre-tokenizer reads each digit alone).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from megarl.data.preprocess import write_splits

DATA_SOURCE = "synthetic/products"
SPECIAL_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'tool' %}{{ '<tool_response>' + message['content'] + '</tool_response>' }}"
    "{% else %}{{ message['content'] }}{% endif %}"
    "{% endfor %}"
)


def tool_call(a: int, b: int) -> str:
    call = {"name": "python", "arguments": {"code": f"print({a}*{b})"}}
    return f"<tool_call>{json.dumps(call)}</tool_call>"


def demonstration(a: int, b: int, calls_tool: bool) -> str:
    """A right answer, with the tool's help or stated at once."""
    answer = f"#### {a * b}"
    return f"{tool_call(a, b)}<tool_response>{a * b}</tool_response>{answer}" if calls_tool else answer


def _row(a: int, b: int, split: str, index: int, calls_tool: bool = True) -> dict:
    question = f"{a}*{b}="
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(a * b)},
        "extra_info": {"split": split, "index": index, "question": question,
                       "answer": demonstration(a, b, calls_tool)},
    }


def products_splits(train: int = 2000, test: int = 64, sft: int = 2000, tool_rate: float = 0.2,
                    seed: int = 0) -> dict[str, list[dict]]:
    """Distinct pairs of 2-digit numbers with a 4-digit product for train and test; `sft` demonstrations on train
    pairs, each calling the tool with probability `tool_rate`."""
    rng = random.Random(seed)
    pairs = rng.sample([(a, b) for a in range(10, 100) for b in range(10, 100) if a * b >= 1000], train + test)
    train_pairs, test_pairs = pairs[:train], pairs[train:]
    demos = [(a, b, rng.random() < tool_rate) for a, b in rng.choices(train_pairs, k=sft)]
    return {
        "train": [_row(a, b, "train", i) for i, (a, b) in enumerate(train_pairs)],
        "test": [_row(a, b, "test", i) for i, (a, b) in enumerate(test_pairs)],
        "sft": [_row(a, b, "sft", i, calls) for i, (a, b, calls) in enumerate(demos)],
    }


def write_products(output_dir: str | Path, **options) -> dict[str, Path]:
    return write_splits(output_dir, products_splits(**options))


def corpus(pairs: int = 400, seed: int = 1) -> list[str]:
    """Texts that cover the task's vocabulary (prompts, calls, results, answers), for a tokenizer made for it."""
    rng = random.Random(seed)
    texts = []
    for _ in range(pairs):
        a, b = rng.randrange(10, 100), rng.randrange(10, 100)
        texts.append(f"{a}*{b}={demonstration(a, b, True)}")
        texts.append(f"{a}*{b}={demonstration(a, b, False)}")
    return texts
