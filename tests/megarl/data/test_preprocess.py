import json
import os

import datasets
import pytest

from megarl.data.preprocess import (
    BOXED_INSTRUCTION,
    GSM8K_INSTRUCTION,
    PreprocessError,
    preprocess,
    split_of,
)
from megarl.rewards import default_compute_score, gsm8k, math
from tests.helpers import SHARED_DATA

# CI always has ../shared beside the clone: there a missing directory fails the test instead of skipping it.
needs_shared = pytest.mark.skipif(
    not SHARED_DATA.is_dir() and not os.environ.get("CI"), reason=f"shared data not found at {SHARED_DATA}"
)


def read(path):
    return datasets.Dataset.from_parquet(str(path)).to_list()


@needs_shared
def test_real_gsm8k_rows_and_gold_answers_score_one(tmp_path):
    written = preprocess("gsm8k", str(SHARED_DATA / "gsm8k"), tmp_path)
    train, test = read(written["train"]), read(written["test"])
    assert (len(train), len(test)) == (7473, 1319)
    with_commas = negatives = 0
    for row in train + test:
        truth = row["reward_model"]["ground_truth"]
        raw = row["extra_info"]["answer"]
        assert row["data_source"] == "openai/gsm8k" and row["ability"] == "math"
        assert row["reward_model"]["style"] == "rule"
        assert gsm8k.compute_score(f"#### {truth}", truth, method="strict") == 1.0
        assert gsm8k.compute_score(raw, truth, method="strict") == 1.0  # the reference solution itself
        assert default_compute_score(row["data_source"], raw, truth) == 1.0
        with_commas += "," in raw.split("####")[-1]
        negatives += truth.startswith("-")
    assert (with_commas, negatives) == (93, 5)
    first = train[0]
    assert first["prompt"] == [{"role": "user", "content": f"{first['extra_info']['question']} {GSM8K_INSTRUCTION}"}]
    assert first["extra_info"]["split"] == "train" and first["extra_info"]["index"] == 0
    assert set(first["extra_info"]) == {"split", "index", "answer", "question"}


@needs_shared
def test_real_math500_rows(tmp_path):
    written = preprocess("math", str(SHARED_DATA / "math" / "math500_test.jsonl"), tmp_path)
    assert list(written) == ["test"]
    rows = read(written["test"])
    raw = [json.loads(line) for line in (SHARED_DATA / "math" / "math500_test.jsonl").open()]
    assert len(rows) == 500
    for row, source in zip(rows, raw):
        truth = row["reward_model"]["ground_truth"]
        assert row["data_source"] == "HuggingFaceH4/MATH-500"
        assert row["prompt"][0]["content"].endswith(BOXED_INSTRUCTION)
        assert math.compute_score(source["solution"], truth) == 1.0
        assert math.compute_score(f"so \\boxed{{{source['answer']}}}", truth) == 1.0


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_custom_boxed_jsonl_like_x_r1(tmp_path):
    src = write_jsonl(tmp_path / "x_r1_750.jsonl", [
        {"problem": "What is 1/2 + 1/4?", "solution": "It is $\\boxed{\\frac{3}{4}}$."},
        {"problem": "2+2?", "solution": "Four.", "answer": "4"},
    ])
    written = preprocess("custom", str(src), tmp_path / "out", split="train")
    rows = read(written["train"])
    assert [r["reward_model"]["ground_truth"] for r in rows] == ["\\frac{3}{4}", "4"]
    assert rows[0]["data_source"] == "math"
    assert default_compute_score("math", "\\boxed{\\dfrac34}", rows[0]["reward_model"]["ground_truth"]) == 1.0
    written = preprocess("custom", str(src), tmp_path / "out2", split="test", data_source="lighteval/MATH",
                         question_key="problem", instruction="")
    row = read(written["test"])[0]
    assert row["data_source"] == "lighteval/MATH" and row["prompt"][0]["content"] == "What is 1/2 + 1/4?"


def test_errors_name_the_file_and_row(tmp_path):
    bad = write_jsonl(tmp_path / "train.jsonl", [
        {"question": "q1", "answer": "x\n#### 3"},
        {"question": "q2", "answer": "no marker"},
    ])
    with pytest.raises(PreprocessError, match=r"train.jsonl row 1: answer has no '#### <number>' line"):
        preprocess("gsm8k", str(bad), tmp_path / "o")
    with pytest.raises(PreprocessError, match=r"row 0: missing text field\(s\) \['question'\]"):
        preprocess("gsm8k", str(write_jsonl(tmp_path / "test.jsonl", [{"q": "x", "answer": "#### 1"}])), tmp_path / "o")
    with pytest.raises(PreprocessError, match=r"row 0: no \\boxed\{\} answer"):
        preprocess("custom", str(write_jsonl(tmp_path / "c_train.jsonl", [{"question": "q", "solution": "s"}])), tmp_path / "o")
    with pytest.raises(PreprocessError, match="cannot tell the split"):
        preprocess("custom", str(write_jsonl(tmp_path / "data.jsonl", [{"question": "q", "answer": "1"}])), tmp_path / "o")
    with pytest.raises(PreprocessError, match="does not exist"):
        preprocess("gsm8k", str(tmp_path / "missing.jsonl"), tmp_path / "o")
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    with pytest.raises(PreprocessError, match="no .* file whose name says train or test"):
        preprocess("gsm8k", str(empty_dir), tmp_path / "o")


@pytest.mark.parametrize(
    "name, split",
    [("train.jsonl", "train"), ("math500_test.jsonl", "test"), ("validation.parquet", "test"),
     ("gsm8k-train-00000.parquet", "train"), ("trainer.jsonl", None), ("contest.jsonl", None)],
)
def test_split_from_file_name(tmp_path, name, split):
    assert split_of(tmp_path / name) == split
