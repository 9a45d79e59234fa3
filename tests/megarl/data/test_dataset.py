import datasets
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megarl.data import DataError, PromptLoader, RLDataset, truncate


def rows(n, words=3):
    return [
        {
            "data_source": "openai/gsm8k",
            "prompt": [{"role": "user", "content": " ".join(["clips"] * (words + i))}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i)},
            "extra_info": {"split": "train", "index": i},
        }
        for i in range(n)
    ]


def to_parquet(path, data):
    datasets.Dataset.from_list(data).to_parquet(str(path))
    return path


def test_items_carry_chat_prompt_ids_and_row_fields(tmp_path, tokenizer):
    ds = RLDataset([to_parquet(tmp_path / "a.parquet", rows(3))], tokenizer, max_prompt_length=256)
    item = ds[1]
    expected = tokenizer.apply_chat_template(item["raw_prompt"], add_generation_prompt=True, tokenize=False)
    assert tokenizer.decode(item["prompt_ids"]) == expected
    assert expected.endswith("<|im_start|>assistant\n")
    assert item["reward_model"] == {"style": "rule", "ground_truth": "1"}
    assert item["data_source"] == "openai/gsm8k" and item["extra_info"]["index"] == 1
    assert "prompt" not in item


def test_filter_overlong_prompts_drops_them(tmp_path, tokenizer):
    data = to_parquet(tmp_path / "a.parquet", rows(6))
    lengths = [len(RLDataset([data], tokenizer, max_prompt_length=999)[i]["prompt_ids"]) for i in range(6)]
    limit = lengths[2]
    ds = RLDataset([data], tokenizer, max_prompt_length=limit, filter_overlong_prompts=True)
    assert [ds[i]["reward_model"]["ground_truth"] for i in range(len(ds))] == ["0", "1", "2"]
    with pytest.raises(DataError, match="no prompts left"):
        RLDataset([data], tokenizer, max_prompt_length=1, filter_overlong_prompts=True)


def test_overlong_prompt_error_names_file_row_and_length(tmp_path, tokenizer):
    first = to_parquet(tmp_path / "first.parquet", rows(2))
    second = to_parquet(tmp_path / "second.parquet", rows(4, words=1))
    full = RLDataset([second], tokenizer, max_prompt_length=999)
    limit = len(full[2]["prompt_ids"])
    with pytest.raises(DataError) as info:
        RLDataset([second, first], tokenizer, max_prompt_length=limit)
    message = str(info.value)
    assert f"second.parquet row 3: the prompt is {len(full[3]['prompt_ids'])} tokens" in message
    assert f"data.max_prompt_length={limit}" in message and "data.truncation=left|right|middle" in message


@pytest.mark.parametrize("mode", ["left", "right", "middle"])
def test_truncation_modes_through_the_dataset(tmp_path, tokenizer, mode):
    data = to_parquet(tmp_path / "a.parquet", rows(1, words=40))
    full = RLDataset([data], tokenizer, max_prompt_length=999)[0]["prompt_ids"]
    cut = RLDataset([data], tokenizer, max_prompt_length=11, truncation=mode)[0]["prompt_ids"]
    assert cut == truncate(full, 11, mode) and len(cut) == 11


def test_truncate_semantics():
    ids = list(range(10))
    assert truncate(ids, 4, "left") == [6, 7, 8, 9]
    assert truncate(ids, 4, "right") == [0, 1, 2, 3]
    assert truncate(ids, 5, "middle") == [0, 1, 7, 8, 9]
    assert truncate(ids, 4, "middle") == [0, 1, 8, 9]
    with pytest.raises(ValueError):
        truncate(ids, 4, "error")


def test_plain_text_prompts(tmp_path, tokenizer):
    data = rows(1)
    data[0]["prompt"] = "raw text prompt"
    ds = RLDataset([to_parquet(tmp_path / "a.parquet", data)], tokenizer, max_prompt_length=64)
    assert tokenizer.decode(ds[0]["prompt_ids"]) == "raw text prompt"


def test_schema_and_file_errors(tmp_path, tokenizer):
    def load(path, **kw):
        return RLDataset([path], tokenizer, max_prompt_length=64, **kw)

    with pytest.raises(DataError, match="missing.parquet does not exist"):
        load(tmp_path / "missing.parquet")
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"this is not parquet")
    with pytest.raises(DataError, match="garbage.parquet is not a readable parquet file"):
        load(garbage)
    no_source = [{k: v for k, v in r.items() if k != "data_source"} for r in rows(2)]
    with pytest.raises(DataError, match=r"missing column\(s\) \['data_source'\].*megarl preprocess"):
        load(to_parquet(tmp_path / "no_source.parquet", no_source))
    with pytest.raises(DataError, match="set data.prompt_key"):
        load(to_parquet(tmp_path / "ok.parquet", rows(2)), prompt_key="question")
    no_truth = [{**r, "reward_model": {"style": "rule"}} for r in rows(2)]
    with pytest.raises(DataError, match="reward_model must be a struct with a ground_truth field"):
        load(to_parquet(tmp_path / "no_truth.parquet", no_truth))
    bad_prompt = [{**r, "prompt": [{"text": "hi"}]} for r in rows(2)]
    with pytest.raises(DataError, match=r"bad_prompt.parquet row 0: the prompt must be text or a list of"):
        load(to_parquet(tmp_path / "bad_prompt.parquet", bad_prompt))
    empty = tmp_path / "empty.parquet"
    datasets.Dataset.from_list(rows(1)).select([]).to_parquet(str(empty))
    with pytest.raises(DataError, match="empty.parquet has no rows"):
        load(empty)
    with pytest.raises(DataError, match="no data files given"):
        RLDataset([], tokenizer, max_prompt_length=64)


def test_chat_prompt_needs_a_chat_template(tmp_path, tokenizer):
    bare = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    bare.chat_template = None
    with pytest.raises(DataError, match="tokenizer has no chat_template"):
        RLDataset([to_parquet(tmp_path / "a.parquet", rows(1))], bare, max_prompt_length=64)


class Items:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"id": i, "text": f"t{i}"}


def test_loader_epochs_are_seeded_permutations():
    loader = PromptLoader(Items(10), 3, seed=7)
    assert len(loader) == 3  # drop_last
    epoch0 = [b["id"] for b in loader]
    epoch1 = [b["id"] for b in loader]
    assert all(len(b) == 3 for b in epoch0)
    assert len(set(sum(epoch0, []))) == 9 and epoch0 != epoch1
    assert [b["id"] for b in PromptLoader(Items(10), 3, seed=7)] == epoch0
    assert [b["id"] for b in PromptLoader(Items(10), 3, seed=8)] != epoch0
    batch = next(iter(PromptLoader(Items(4), 2, shuffle=False)))
    assert batch == {"id": [0, 1], "text": ["t0", "t1"]}
    assert [b["id"] for b in PromptLoader(Items(5), 2, shuffle=False, drop_last=False)][-1] == [4]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 11), st.integers(1, 5))
def test_loader_resumes_where_it_stopped(stop_after, batch_size):
    def take(loader, count):
        out = []
        while len(out) < count:
            for batch in loader:
                out.append(batch["id"])
                if len(out) == count:
                    break
        return out

    reference = take(PromptLoader(Items(11), batch_size, seed=3), 12)
    first = PromptLoader(Items(11), batch_size, seed=3)
    head = take(first, stop_after) if stop_after else []
    resumed = PromptLoader(Items(11), batch_size, seed=3)
    resumed.load_state_dict(first.state_dict())
    assert head + take(resumed, 12 - stop_after) == reference


def test_state_saved_after_an_epochs_last_batch_resumes_a_full_next_epoch():
    loader = PromptLoader(Items(6), 2, seed=5)
    assert len(list(loader)) == 3
    assert loader.state_dict() == {"epoch": 1, "batch_in_epoch": 0, "seed": 5}
    resumed = PromptLoader(Items(6), 2, seed=5)
    resumed.load_state_dict(loader.state_dict())
    assert [b["id"] for b in resumed] == [b["id"] for b in loader]
    assert resumed.epoch == loader.epoch == 2


def test_loader_errors():
    with pytest.raises(DataError, match="needs 8 prompts but the dataset has only 5"):
        PromptLoader(Items(5), 8)
    loader = PromptLoader(Items(5), 2, seed=1)
    with pytest.raises(ValueError, match="seed"):
        loader.load_state_dict({"epoch": 0, "batch_in_epoch": 0, "seed": 2})


def not_utf8_parquet(path, rows_, column, row, bad: bytes):
    """`rows_` as parquet with string column `column`'s value in `row` replaced by the bytes `bad`, unchecked (as a
    writer that does not validate its text leaves them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = datasets.Dataset.from_list(rows_).data.table
    values = [v.encode() if isinstance(v, str) else v for v in table[column].to_pylist()]
    values[row] = bad
    text = pa.array(values, type=pa.binary()).view(pa.string())
    pq.write_table(table.set_column(table.schema.get_field_index(column), column, text), path)
    return path


def test_an_empty_or_undecodable_prompt_is_an_error_naming_file_and_row(tmp_path, tokenizer):
    empty = rows(3)
    empty[1]["prompt"] = []
    data = to_parquet(tmp_path / "empty.parquet", empty)
    with pytest.raises(DataError, match=rf"^{data} row 1: the prompt is an empty list of messages"):
        RLDataset([data], tokenizer, max_prompt_length=256)
    text_rows = [{**row, "prompt": f"question {i}"} for i, row in enumerate(rows(3))]
    data = not_utf8_parquet(tmp_path / "latin1.parquet", text_rows, "prompt", 2, "café".encode("latin-1"))
    with pytest.raises(DataError, match=rf"^{data} row 2: column 'prompt' is not valid UTF-8"):
        RLDataset([data], tokenizer, max_prompt_length=256)
