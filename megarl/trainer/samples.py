"""Sample logs (verl's `trainer.rollout_data_dir` and `trainer.validation_data_dir`), which `megarl view` reads.

After each step, `trainer.log_samples` of the batch's samples go to `{rollout_data_dir}/{step}.jsonl`, a JSON object
per sample: verl's `input`, `output`, `gts`, `score` and `step`, where the scorer found the answer (`answer`:
its text and character span in `output`), `acc`, the reward after the KL penalty (`reward`), the response's tokens
one by one (`tokens`) and its per-token columns of the PPO iteration (rollout and trainer log-probs, reference
log-probs, values, advantages, returns, entropy), with a judge what it read and wrote (`judge`) and its score
(`judge_score`), with the step's metrics beside them in `{step}.metrics.json`.
Validations write their first samples (the same prompts each time) to `{validation_data_dir}/{step}.jsonl`.

The driver writes each file whole (a temporary file renamed into place); a resumed run removes the files of steps
after its checkpoint (the run it resumes may have logged them), as metrics.jsonl drops its lines.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Callable, Optional

import torch

from megarl.columns import response_lengths
from megarl.config.schema import RewardConfig, TrainerConfig
from megarl.rewards.outcome import AnswerSpan
from megarl.rewards.registry import ANSWER_FINDERS
from parallel.batch import Batch

# The batch's per-token columns a record carries (where the step has them), under the record's key.
TOKEN_COLUMNS = {"rollout_log_probs": "rollout_log_probs", "old_log_probs": "old_log_probs",
                 "ref_log_prob": "ref_log_prob", "values": "values", "advantages": "advantages",
                 "returns": "returns", "entropys": "entropy"}
# Per-sample columns of some steps: the reward model's, the judge's and the rules' scores apart, DAPO's overlong
# penalty.
SCALAR_COLUMNS = {"rm_scores": "rm_score", "judge_scores": "judge_score", "rule_scores": "rule_score",
                  "overlong_penalty": "overlong_penalty"}
STEP_FILE = re.compile(r"^(\d+)(\.jsonl|\.metrics\.json)$")
# Per-token values keep float32's precision (7 significant digits), not float64's noise: small differences between
# log-probs (the trainer/rollout ratio) must survive.
SIGNIFICANT = "{:.7g}"

FindAnswer = Callable[[str, str, Optional[str]], Optional[AnswerSpan]]  # (data_source, response, pred) → span


def answer_finder(reward: RewardConfig) -> FindAnswer:
    """Rule rewards find the answer as they score it; a reward function's answer is the `pred` it returns (verl's
    convention), looked up as the last place it occurs in the response."""

    def find(data_source: str, response: str, pred: Optional[str]) -> Optional[AnswerSpan]:
        if reward.function is None and data_source in ANSWER_FINDERS:
            return ANSWER_FINDERS.get(data_source)(response, **reward.kwargs)
        if pred:
            start = response.rfind(str(pred))
            return AnswerSpan(str(pred), start, start + len(str(pred))) if start >= 0 else None
        return None

    return find


def chosen_rows(size: int, count: int) -> list[int]:
    """`count` rows spread evenly over a batch of `size` (every row for -1), so several prompts are shown."""
    if count < 0 or count >= size:
        return list(range(size))
    return [i * size // count for i in range(count)]


def sample_records(batch: Batch, rows: list[int], tokenizer, find_answer: FindAnswer, step: int,
                   first_index: int = 0) -> list[dict]:
    """One record per chosen row of a scored batch (training's after the step, validation's after scoring); a
    record's `index` is its row plus `first_index`."""
    lengths = response_lengths(batch["response_mask"]).tolist()
    scores = batch["token_level_scores"].sum(-1).tolist()
    rewards = batch["token_level_rewards"].sum(-1).tolist() if "token_level_rewards" in batch else None
    preds = batch["pred"] if "pred" in batch else None
    records = []
    for row in rows:
        ids = batch["responses"][row, : lengths[row]].tolist()
        output = tokenizer.decode(ids, skip_special_tokens=True)  # the text the scorer read
        source = batch["data_source"][row]
        answer = find_answer(source, output, preds[row] if preds is not None else None)
        record = {"step": step, "index": first_index + row, "uid": str(batch["uid"][row]), "data_source": source,
                  "input": tokenizer.decode(torch.as_tensor(batch["prompt_ids"][row]).tolist()), "output": output,
                  "gts": batch["reward_model"][row].get("ground_truth"),
                  "answer": answer._asdict() if answer is not None else None, "score": scores[row],
                  "acc": float(batch["acc"][row]), "finish_reason": batch["finish_reason"][row],
                  "response_length": lengths[row], "tokens": tokenizer.batch_decode([[i] for i in ids])}
        if rewards is not None:
            record["reward"] = rewards[row]
        if "agent_stats" in batch:  # multi-turn: the model's turns and the tool messages between them
            record["turns"] = turns(ids, batch["response_mask"][row, : lengths[row]].tolist(), tokenizer)
            record["agent"] = dataclasses.asdict(batch["agent_stats"][row])
        if "judge_output" in batch:  # what the judge read and wrote, and whether its output parsed
            record["judge"] = {"prompt": batch["judge_prompt"][row], "output": batch["judge_output"][row],
                               "parsed": bool(batch["judge_parsed"][row])}
        for column, key in SCALAR_COLUMNS.items():
            if column in batch:
                record[key] = float(batch[column][row])
        for column, key in TOKEN_COLUMNS.items():
            if column in batch:
                record[key] = [float(SIGNIFICANT.format(v)) for v in batch[column][row, : lengths[row]].tolist()]
        records.append(record)
    return records


def turns(ids: list[int], loss_mask: list[float], tokenizer) -> list[dict]:
    """A multi-turn response as its runs of model tokens (trained) and tool tokens (not), each decoded with its
    markers: [{"by": "model" | "tool", "text": ...}]."""
    runs: list[dict] = []
    for token, trained in zip(ids, loss_mask):
        by = "model" if trained else "tool"
        if not runs or runs[-1]["by"] != by:
            runs.append({"by": by, "ids": []})
        runs[-1]["ids"].append(token)
    return [{"by": run["by"], "text": tokenizer.decode(run["ids"], skip_special_tokens=False)} for run in runs]


class SampleDirectory:
    """One directory of per-step files."""

    def __init__(self, path: Path, start_step: int):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        for file in path.iterdir():
            matched = STEP_FILE.match(file.name)
            if matched and int(matched.group(1)) > start_step:
                file.unlink()

    def write(self, step: int, records: list[dict], metrics: dict | None = None) -> None:
        self._write_whole(f"{step}.jsonl", "".join(json.dumps(record) + "\n" for record in records))
        if metrics is not None:
            self._write_whole(f"{step}.metrics.json", json.dumps(metrics, indent=1))

    def _write_whole(self, name: str, text: str) -> None:
        partial = self.path / f".{name}.partial"
        partial.write_text(text)
        os.replace(partial, self.path / name)


class SampleLog:
    """The run's sample logs; a no-op in processes that do not write (torchrun's other ranks) and when
    `trainer.log_samples` is 0."""

    def __init__(self, trainer: TrainerConfig, reward: RewardConfig, tokenizer, is_writer: bool, start_step: int):
        self.count, self.tokenizer, self.find_answer = trainer.log_samples, tokenizer, answer_finder(reward)
        self.train = self.validation = None
        if is_writer and trainer.samples_logged:
            output = Path(trainer.output_dir) / "samples"
            self.train = SampleDirectory(Path(trainer.rollout_data_dir or output / "train"), start_step)
            self.validation = SampleDirectory(Path(trainer.validation_data_dir or output / "val"), start_step)

    def log_step(self, step: int, batch: Batch, metrics: dict[str, float]) -> None:
        if self.train is not None:
            rows = chosen_rows(len(batch), self.count)
            self.train.write(step, sample_records(batch, rows, self.tokenizer, self.find_answer, step), metrics)

    def log_validation(self, step: int, scored: list[Batch]) -> None:
        """`scored`: the validation's first samples (`trainer.log_samples` of them), generated and scored."""
        if self.validation is not None:
            records, index = [], 0
            for batch in scored:
                rows = list(range(len(batch)))
                records += sample_records(batch, rows, self.tokenizer, self.find_answer, step, first_index=index)
                index += len(batch)
            self.validation.write(step, records)
