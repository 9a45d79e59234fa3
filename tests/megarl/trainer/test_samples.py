"""Sample logs: which samples, what a record holds (the answer where the scorer found it, per-token columns), whole
files only, and a resumed run's later files dropped."""

import json

import pytest
import torch

from megarl.config import load_config
from megarl.config.schema import RewardConfig
from megarl.rewards.outcome import AnswerSpan
from megarl.trainer.samples import SampleDirectory, SampleLog, answer_finder, chosen_rows, sample_records
from parallel.batch import Batch
from tests.helpers import make_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tok"))


def scored_batch(tokenizer, responses: list[str], sources: list[str], truths: list[str], **columns) -> Batch:
    """Responses as the step holds them after scoring: right-padded ids, masks, scores on the last token."""
    ids = [tokenizer.encode(text) for text in responses]
    width = max(len(row) for row in ids)
    tokens, mask = torch.zeros(len(ids), width, dtype=torch.long), torch.zeros(len(ids), width)
    for i, row in enumerate(ids):
        tokens[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1.0
    scores = torch.zeros(len(ids), width)
    scores[0, len(ids[0]) - 1] = 1.0
    tensors = {"responses": tokens, "response_mask": mask, "token_level_scores": scores,
               "acc": scores.sum(-1), "rollout_log_probs": -mask * 0.5, **columns}
    fields = {"prompt_ids": [tokenizer.encode("What is 2 + 3?")] * len(ids), "data_source": sources,
              "reward_model": [{"ground_truth": t} for t in truths], "uid": [str(i) for i in range(len(ids))],
              "finish_reason": ["stop"] * len(ids)}
    return Batch(tensors, fields)


def test_rows_are_spread_over_the_batch():
    assert chosen_rows(16, 4) == [0, 4, 8, 12]
    assert chosen_rows(3, 4) == [0, 1, 2]
    assert chosen_rows(5, -1) == [0, 1, 2, 3, 4]


def test_rule_rewards_find_the_answer_where_they_score_it():
    find = answer_finder(RewardConfig())
    response = "3 + 2 is 5, so #### 5 and later 7"
    assert find("openai/gsm8k", response, None) == AnswerSpan("5", 20, 21)
    assert find("math", r"so \boxed{\frac{1}{2}}", None) == AnswerSpan(r"\frac{1}{2}", 10, 21)
    flexible = answer_finder(RewardConfig(kwargs={"method": "flexible", "format_score": 0.1}))
    assert flexible("openai/gsm8k", response, None) == AnswerSpan("7", len(response) - 1, len(response))
    assert find("openai/gsm8k", "no number here", None) is None
    # A reward function's answer is the `pred` it returns, found in the response.
    custom = answer_finder(RewardConfig(function="reward.py:score"))
    assert custom("openai/gsm8k", "Answer: 42 (42)", "42") == AnswerSpan("42", 12, 14)
    assert custom("openai/gsm8k", "Answer: 42", None) is None
    assert custom("openai/gsm8k", "Answer: 42", "41") is None


def test_a_record_holds_the_ppo_iteration_of_its_sample(tokenizer):
    batch = scored_batch(tokenizer, ["2 + 3 = 5 #### 5", "it is 4"], ["openai/gsm8k"] * 2, ["5", "5"])
    mask = batch["response_mask"]
    batch = batch.union(Batch({"token_level_rewards": batch["token_level_scores"] - 0.01 * mask,
                               "values": mask * 0.25, "advantages": mask * 0.123456, "returns": mask,
                               "old_log_probs": -mask * 0.4, "entropys": mask * 2.0}))
    first, second = sample_records(batch, [0, 1], tokenizer, answer_finder(RewardConfig()), step=3, first_index=10)
    length = int(mask[0].sum())
    assert first["step"] == 3 and first["index"] == 10 and second["index"] == 11
    assert first["input"] == "What is 2 + 3?" and first["output"] == "2 + 3 = 5 #### 5"
    assert first["gts"] == "5" and first["score"] == 1.0 and first["acc"] == 1.0
    assert first["answer"] == {"text": "5", "start": 15, "end": 16}
    assert first["output"][first["answer"]["start"]:first["answer"]["end"]] == "5"
    assert first["reward"] == pytest.approx(1.0 - 0.01 * length)
    assert first["response_length"] == length and "".join(first["tokens"]) == first["output"]
    assert first["advantages"] == [0.123456] * length  # float32's digits, without float64's noise
    for key in ("rollout_log_probs", "old_log_probs", "values", "returns", "entropy"):
        assert len(first[key]) == length
    assert "ref_log_prob" not in first  # the step had no reference
    assert second["answer"] is None and second["score"] == 0.0
    assert len(second["tokens"]) == second["response_length"] == int(mask[1].sum())


def test_files_are_written_whole_and_a_resumed_run_drops_later_steps(tmp_path):
    directory = SampleDirectory(tmp_path / "train", start_step=0)
    for step in (1, 2, 3):
        directory.write(step, [{"step": step}], {"critic/score/mean": step / 10})
    assert sorted(p.name for p in (tmp_path / "train").iterdir()) == [
        "1.jsonl", "1.metrics.json", "2.jsonl", "2.metrics.json", "3.jsonl", "3.metrics.json"]
    assert json.loads((tmp_path / "train" / "2.metrics.json").read_text()) == {"critic/score/mean": 0.2}
    (tmp_path / "train" / "notes.txt").write_text("a user's file")
    SampleDirectory(tmp_path / "train", start_step=1)  # resumed from step 1's checkpoint: steps 2, 3 run again
    assert sorted(p.name for p in (tmp_path / "train").iterdir()) == ["1.jsonl", "1.metrics.json", "notes.txt"]


def test_sample_logs_go_where_the_config_says_and_zero_turns_them_off(tmp_path, tokenizer):
    batch = scored_batch(tokenizer, ["#### 5", "#### 4", "#### 1"], ["openai/gsm8k"] * 3, ["5"] * 3)
    cfg = load_config(overrides=[f"trainer.output_dir={tmp_path}/run", "trainer.log_samples=2"])
    log = SampleLog(cfg.trainer, cfg.reward, tokenizer, is_writer=True, start_step=0)
    log.log_step(1, batch, {"critic/score/mean": 0.5})
    log.log_validation(1, [batch, batch.select(indices=[0])])
    train = (tmp_path / "run/samples/train/1.jsonl").read_text().splitlines()
    assert [json.loads(line)["index"] for line in train] == [0, 1]
    validation = [json.loads(line) for line in (tmp_path / "run/samples/val/1.jsonl").read_text().splitlines()]
    assert [record["index"] for record in validation] == [0, 1, 2, 3]
    elsewhere = load_config(overrides=[f"trainer.output_dir={tmp_path}/b", f"trainer.rollout_data_dir={tmp_path}/r",
                                       f"trainer.validation_data_dir={tmp_path}/v"])
    SampleLog(elsewhere.trainer, elsewhere.reward, tokenizer, is_writer=True, start_step=0).log_step(1, batch, {})
    assert len((tmp_path / "r/1.jsonl").read_text().splitlines()) == 3 and (tmp_path / "v").is_dir()
    off = load_config(overrides=[f"trainer.output_dir={tmp_path}/off", "trainer.log_samples=0"])
    SampleLog(off.trainer, off.reward, tokenizer, is_writer=True, start_step=0).log_step(1, batch, {})
    not_writer = SampleLog(cfg.trainer, cfg.reward, tokenizer, is_writer=False, start_step=0)
    not_writer.log_step(2, batch, {})
    assert not (tmp_path / "off").exists() and not (tmp_path / "run/samples/train/2.jsonl").exists()
