"""What a reward model trained on rule-graded rankings (`megarl sample-rankings` → `megarl rm`) has learned, in the
two figures that tell whether PPO against it can be trusted (recipes/tiny_cpu_rlhf.yaml's comment quotes them):

- per pair of grades (megarl/data/rankings.py: 3 right in the graded `#### N` format, 2 graded but wrong, 1 right
  in another format, 0 neither), how often it scores the better response of a held-out ranking higher;
- over every graded answer `#### 0` … `#### {max_answer}` to each prompt of a dataset, how often the right one
  scores highest: a policy free to chase the model's score is drawn to its favourite, right or not.

    python benchmarks/reward_model_probe.py --model outputs/tiny_cpu/rm/hf \
        --rankings outputs/tiny_cpu/data/rankings_test.parquet --prompts outputs/tiny_cpu/data/train.parquet
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import defaultdict

import datasets
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from megarl.data.dataset import encode_prompt
from megarl.data.rankings import grade


class Judge:
    """The checkpoint's score of a prompt + response, encoded as `megarl rm` encodes its data."""

    def __init__(self, path: str):
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForSequenceClassification.from_pretrained(path, torch_dtype=torch.float32).eval()

    @torch.no_grad()
    def __call__(self, prompt, response: str) -> float:
        ids = [*encode_prompt(self.tokenizer, prompt, "prompt"),
               *self.tokenizer(response, add_special_tokens=False)["input_ids"], self.tokenizer.eos_token_id]
        return self.model(torch.tensor([ids])).logits[0, 0].item()


def pair_accuracy(judge: Judge, rankings: list[dict]) -> dict[str, float]:
    """"better-worse" grades → the fraction of such pairs the model orders as the ranking does."""
    right = defaultdict(list)
    for row in rankings:
        truth = str(row["reward_model"]["ground_truth"])
        scored = [(grade(text, truth), judge(row["prompt"], text)) for text in row["responses"]]
        for (better, high), (worse, low) in itertools.combinations(scored, 2):
            right[f"{better}-{worse}"].append(high > low)
    return {pair: sum(hits) / len(hits) for pair, hits in sorted(right.items())}


def right_answer_on_top(judge: Judge, rows: list[dict], max_answer: int) -> float:
    """The fraction of prompts whose right answer scores highest among `#### 0` … `#### max_answer`."""
    hits = 0
    for row in rows:
        scores = [judge(row["prompt"], f"#### {answer}") for answer in range(max_answer + 1)]
        hits += max(range(len(scores)), key=scores.__getitem__) == int(row["reward_model"]["ground_truth"])
    return hits / len(rows)


def read_rows(path: str) -> list[dict]:
    return list(datasets.load_dataset("parquet", data_files=path, split="train"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the reward model (a HF sequence classifier)")
    parser.add_argument("--rankings", required=True, help="held-out rankings (megarl sample-rankings)")
    parser.add_argument("--prompts", required=True, help="prompts with integer ground truths, e.g. RL training data")
    parser.add_argument("--max-answer", type=int, default=39, help="the largest answer tried (the task's: 19 + 19)")
    args = parser.parse_args()
    judge = Judge(args.model)
    print(json.dumps({"pair_accuracy": pair_accuracy(judge, read_rows(args.rankings)),
                      "right_answer_on_top": right_answer_on_top(judge, read_rows(args.prompts), args.max_answer)},
                     indent=1))


if __name__ == "__main__":
    main()
