"""`megarl sample-rankings`: reward-model data from a policy's own samples (InstructGPT stage 2's labelling, done by a
rule where the task has one). For each prompt of a GSM8K-format dataset (`#### N` answers, ground truth in
`reward_model.ground_truth`), the policy samples responses; each falls in one of four grades — right answer in the
graded format, a wrong one in the graded format, the right answer in another format, neither — and a prompt whose
samples reach `k` distinct grades gives ranking rows (`--per-prompt` of them, from different samples): `prompt` and
`responses`, one sample per grade, best first (`megarl rm`'s rankings). Prompts that do not are left out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Sequence

from megarl.rewards.gsm8k import find_answer

GRADES = 4


def grade(response: str, ground_truth: str) -> int:
    """3: right in the graded format (`#### N`), 2: graded but wrong, 1: right in another format, 0: neither. The
    format ranks first: a reward model then never has to weigh a right answer against the graded format (the rule
    pays only for both), and the rankings agree with the rule on every pair it tells apart."""
    graded = find_answer(response, "strict")
    loose = find_answer(response, "flexible")
    right = any(found is not None and found.text.replace(",", "") == ground_truth for found in (graded, loose))
    return 2 * (graded is not None) + right


def ranking_rows(rows: list[dict], responses: list[list[str]], k: int, per_prompt: int = 1) -> list[dict]:
    """Up to `per_prompt` rankings per prompt whose responses reach `k` distinct grades, each one response of each of
    the `k` best grades, best first: ranking i takes each grade's i-th distinct response (its last, when it has
    fewer), and a ranking equal to an earlier one is dropped."""
    out = []
    for row, sampled in zip(rows, responses):
        by_grade: dict[int, list[str]] = {}
        for response in sampled:
            texts = by_grade.setdefault(grade(response, str(row["reward_model"]["ground_truth"])), [])
            if response.strip() not in {text.strip() for text in texts}:
                texts.append(response)
        if len(by_grade) < k:
            continue
        best = sorted(by_grade, reverse=True)[:k]
        seen = set()
        for i in range(per_prompt):
            ranking = tuple(by_grade[g][min(i, len(by_grade[g]) - 1)] for g in best)
            if ranking not in seen and len({text.strip() for text in ranking}) == k:
                seen.add(ranking)
                out.append({"prompt": row["prompt"], "responses": list(ranking),
                            "data_source": row.get("data_source"), "reward_model": row["reward_model"]})
    return out


def sample_responses(model_path: str, rows: list[dict], samples: int, temperature: float, max_new_tokens: int,
                     seed: int) -> list[list[str]]:
    """`samples` responses per prompt from the HF model at `model_path` (the prompts under its chat template)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(model_path)
    torch.manual_seed(seed)
    out = []
    for start in range(0, len(rows), 64):
        chunk = rows[start : start + 64]
        prompts = [tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False)
                   for r in chunk]
        encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            generated = model.generate(**encoded, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                       max_new_tokens=max_new_tokens, num_return_sequences=samples,
                                       pad_token_id=tokenizer.pad_token_id)
        texts = tokenizer.batch_decode(generated[:, encoded.input_ids.shape[1]:], skip_special_tokens=True)
        out += [texts[i * samples : (i + 1) * samples] for i in range(len(chunk))]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="megarl sample-rankings", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="the policy's HF checkpoint (e.g. the SFT output's hf/)")
    parser.add_argument("--data", required=True, help="a GSM8K-format parquet (e.g. from `megarl preprocess`)")
    parser.add_argument("--out", required=True, help="where to write the rankings parquet")
    parser.add_argument("--k", type=int, default=GRADES, help=f"responses per ranking, 2..{GRADES}")
    parser.add_argument("--samples", type=int, default=32, help="responses sampled per prompt")
    parser.add_argument("--per-prompt", type=int, default=1, help="rankings per prompt, from different samples")
    parser.add_argument("--temperature", type=float, default=1.5)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not 2 <= args.k <= GRADES:
        parser.error(f"--k={args.k} must be in 2..{GRADES} (there are {GRADES} grades)")
    import datasets

    rows = list(datasets.load_dataset("parquet", data_files=args.data, split="train"))
    sampled = sample_responses(args.model, rows, args.samples, args.temperature, args.max_new_tokens, args.seed)
    ranked = ranking_rows(rows, sampled, args.k, args.per_prompt)
    if not ranked:
        print(f"error: no prompt's {args.samples} samples reached {args.k} grades: raise --samples or "
              "--temperature, or lower --k")
        return 2
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_list(ranked).to_parquet(args.out)
    prompts = len({json.dumps(r["prompt"]) for r in ranked})
    print(f"{args.out}: {len(ranked)} rankings of {args.k} from {prompts} of {len(rows)} prompts (the others' "
          f"samples reached fewer than {args.k} grades)")
    return 0
