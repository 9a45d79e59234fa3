"""The reward model's rankings: both row shapes load as RL prompts + eos-ended responses, best first; ties, short
rankings, overlong sequences and missing columns are errors naming the file, the row and the fix."""

import datasets
import pytest

from megarl.data.dataset import DataError, encode_prompt
from megarl.data.ranking_dataset import RankingColumns, RankingDataset, check_ranking_file, ranking_batch
from tests.helpers import make_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def write(path, rows):
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    return path


def chat(text):
    return [{"role": "user", "content": text}]


def tokens(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


def test_pairs_and_rankings_load_best_first(tokenizer, tmp_path):
    pairs = write(tmp_path / "pairs.parquet", [{"prompt": chat("1 + 2?"), "chosen": "#### 3", "rejected": "= 4"}])
    rankings = write(tmp_path / "rankings.parquet", [
        {"prompt": chat("2 + 2?"), "responses": ["#### 4", "= 4", "#### 5"]},
        {"prompt": chat("3 + 3?"), "responses": ["#### 6", "= 7"]},  # K may differ between rows
    ])
    dataset = RankingDataset([pairs, rankings], tokenizer, RankingColumns(), max_length=64)
    assert len(dataset) == 3
    first = dataset[0]
    assert first["prompt_ids"] == encode_prompt(tokenizer, chat("1 + 2?"), "")
    assert first["response_ids"] == [tokens(tokenizer, "#### 3"), tokens(tokenizer, "= 4")]
    assert dataset[1]["response_ids"] == [tokens(tokenizer, t) for t in ("#### 4", "= 4", "#### 5")]
    assert [len(dataset[i]["response_ids"]) for i in range(3)] == [2, 3, 2]


def test_text_prompts_and_dotted_keys(tokenizer, tmp_path):
    file = write(tmp_path / "d.parquet", [{"q": "What is 1 + 1?", "extra": {"ranked": ["2", "3"]}}])
    dataset = RankingDataset([file], tokenizer, RankingColumns(prompt="q", responses="extra.ranked"), max_length=64)
    assert dataset[0]["prompt_ids"] == tokenizer("What is 1 + 1?")["input_ids"]


@pytest.mark.parametrize("row, message", [
    ({"prompt": "p", "chosen": "#### 3", "rejected": " #### 3\n"}, "row 1: chosen and rejected are the same response"),
    ({"prompt": "p", "responses": ["a", "b", "a "]}, r"row 1: responses\[0\] and responses\[2\] are the same response"),
])
def test_a_tie_is_refused_naming_the_row(tokenizer, tmp_path, row, message):
    good = {key: (["x", "y", "z"] if key == "responses" else key) for key in row}
    file = write(tmp_path / "tie.parquet", [good, row])
    for load in (lambda: RankingDataset([file], tokenizer, RankingColumns(), 64),
                 lambda: check_ranking_file(file, RankingColumns())):
        with pytest.raises(DataError, match=message) as info:
            load()
        assert str(file) in str(info.value) and "Keep one of them" in str(info.value)


def test_fewer_than_two_responses_is_refused(tokenizer, tmp_path):
    file = write(tmp_path / "short.parquet", [{"prompt": "p", "responses": ["a", "b"]},
                                              {"prompt": "p", "responses": ["a"]}])
    with pytest.raises(DataError, match=r"short.parquet row 1: responses holds 1 response\(s\); a ranking needs a "
                                        "list of at least 2 responses, best first"):
        RankingDataset([file], tokenizer, RankingColumns(), 64)


def test_an_overlong_sequence_is_an_error_not_a_cut(tokenizer, tmp_path):
    file = write(tmp_path / "long.parquet", [{"prompt": "p", "responses": ["short", "a much longer answer " * 8]}])
    with pytest.raises(DataError, match=r"long.parquet row 0: prompt \+ responses\[1\] \+ eos is \d+ tokens, more "
                                        "than data.max_length=16. Raise data.max_length, or drop the row"):
        RankingDataset([file], tokenizer, RankingColumns(), 16)


def test_missing_columns_are_refused_before_the_run(tmp_path):
    file = write(tmp_path / "d.parquet", [{"prompt": "p", "chosen": "a", "answer": "b"}])
    with pytest.raises(DataError, match="rows need a column 'responses' .* or the columns 'chosen' and 'rejected'.*"
                                        "it has \\['prompt', 'chosen', 'answer'\\]. Set data.responses_key"):
        check_ranking_file(file, RankingColumns())
    with pytest.raises(DataError, match="no column 'question' for data.prompt_key=question"):
        check_ranking_file(file, RankingColumns(prompt="question", rejected="answer"))
    check_ranking_file(file, RankingColumns(rejected="answer"))


def test_a_last_evaluation_batch_is_padded_with_weightless_rankings():
    batch = ranking_batch({"prompt_ids": [[1], [2], [3]], "response_ids": [[[4], [5]], [[6], [7]], [[8], [9]]]}, 2)
    assert len(batch) == 4 and batch["weight"].tolist() == [1.0, 1.0, 1.0, 0.0]
    assert list(batch["prompt_ids"][3]) == [1] and len(batch.chunk(2)[1]) == 2
