import datasets
import pytest
import torch

from megarl.data import DataError, RLDataset
from megarl.data.sft_dataset import SFTDataset, sft_batch


def rows(n):
    return [{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"How many clips? {i}"}],
             "reward_model": {"ground_truth": str(i)},
             "extra_info": {"index": i, "answer": f"She sold {i} clips. #### {i}"}} for i in range(n)]


def to_parquet(path, data):
    datasets.Dataset.from_list(data).to_parquet(str(path))
    return path


def load(path, tokenizer, **kwargs):
    options = {"prompt_key": "prompt", "response_key": "extra_info.answer", "max_length": 256, **kwargs}
    return SFTDataset([path], tokenizer, **options)


def test_prompts_are_encoded_as_rl_prompts_and_responses_end_with_eos(tmp_path, tokenizer):
    path = to_parquet(tmp_path / "a.parquet", rows(3))
    item = load(path, tokenizer)[2]
    assert item["prompt_ids"] == RLDataset([path], tokenizer, max_prompt_length=256)[2]["prompt_ids"]
    assert item["response_ids"][-1] == tokenizer.eos_token_id
    assert tokenizer.decode(item["response_ids"]) == "She sold 2 clips. #### 2<|im_end|>"


def test_text_prompts_and_top_level_response_columns(tmp_path, tokenizer):
    path = to_parquet(tmp_path / "qa.parquet", [{"question": "1 + 1 =", "answer": "2"}])
    item = load(path, tokenizer, prompt_key="question", response_key="answer")[0]
    assert tokenizer.decode(item["prompt_ids"]) == "1 + 1 ="
    assert tokenizer.decode(item["response_ids"]) == "2<|im_end|>"


def test_plain_text_conditions_on_its_first_token_and_errors_name_the_recipe_key(tmp_path, tokenizer):
    path = to_parquet(tmp_path / "text.parquet", [{"text": "one two three"}])
    item = load(path, tokenizer, prompt_key=None, response_key="text")[0]
    ids = tokenizer("one two three", add_special_tokens=False)["input_ids"]
    assert item == {"prompt_ids": ids[:1], "response_ids": ids[1:] + [tokenizer.eos_token_id]}
    with pytest.raises(DataError, match=r"no column 'body' for data.ptx_response_key=body"):
        load(path, tokenizer, prompt_key=None, response_key="body",
             config_keys=("data.ptx_prompt_key", "data.ptx_response_key"))


def test_missing_or_wrong_columns_name_the_key_and_what_is_there(tmp_path, tokenizer):
    path = to_parquet(tmp_path / "a.parquet", rows(2))
    with pytest.raises(DataError, match=r"no column 'response' for data.response_key=response; it has \["):
        load(path, tokenizer, response_key="response")
    with pytest.raises(DataError, match=r"extra_info has no field 'solution'.*its fields are \['index', 'answer'\]"):
        load(path, tokenizer, response_key="extra_info.solution")
    with pytest.raises(DataError, match="data_source has no field 'x'.*not a struct"):
        load(path, tokenizer, response_key="data_source.x")
    with pytest.raises(DataError, match=r"row 0: the response \(extra_info.index\) must be text"):
        load(path, tokenizer, response_key="extra_info.index")
    with pytest.raises(DataError, match="data file .*absent.parquet does not exist"):
        load(tmp_path / "absent.parquet", tokenizer)


def test_overlong_samples_are_an_error_or_cut(tmp_path, tokenizer):
    path = to_parquet(tmp_path / "a.parquet", rows(1))
    full = load(path, tokenizer)[0]
    prompt, response = full["prompt_ids"], full["response_ids"]
    limit = len(prompt) + len(response) - 3
    with pytest.raises(DataError, match=f"a.parquet row 0: prompt \\+ response \\+ eos is {limit + 3} tokens, more "
                                        f"than data.max_length={limit}"):
        load(path, tokenizer, max_length=limit)
    right = load(path, tokenizer, max_length=limit, truncation="right")[0]
    assert right == {"prompt_ids": prompt, "response_ids": response[:-3]}
    left = load(path, tokenizer, max_length=limit, truncation="left")[0]
    assert left == {"prompt_ids": prompt[3:], "response_ids": response}
    short = len(response) - 2  # the prompt is cut away: the first kept token is the prompt
    assert load(path, tokenizer, max_length=short, truncation="left")[0] == {
        "prompt_ids": response[2:3], "response_ids": response[3:]}
    with pytest.raises(DataError, match="the prompt alone is .* leaves no response to train on"):
        load(path, tokenizer, max_length=len(prompt), truncation="right")


def test_batches_pad_responses_and_rows(tmp_path, tokenizer):
    items = {"prompt_ids": [[1, 2], [3]], "response_ids": [[4, 5, 6], [7]]}
    batch = sft_batch(items, multiple_of=4)
    assert list(batch["prompt_ids"]) == [[1, 2], [3], [1, 2], [1, 2]]
    assert torch.equal(batch["responses"], torch.tensor([[4, 5, 6], [7, 0, 0], [0, 0, 0], [0, 0, 0]]))
    assert torch.equal(batch["response_mask"], torch.tensor([[1.0, 1, 1], [1, 0, 0], [0, 0, 0], [0, 0, 0]]))
    assert len(sft_batch(items)) == 2
