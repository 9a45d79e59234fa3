"""A reward model that reads text differently from the policy gets each prompt + response re-encoded as `megarl rm`
encodes its training data; one that reads alike scores the policy's ids as they are."""

import pytest
import torch

from megarl.data.retemplate import Retemplate, reads_alike
from megarl.models.tokenizer import PLAIN_TEMPLATE
from tests.helpers import make_tokenizer

PROMPTS = [[{"role": "user", "content": "What is 2 + 3?"}], [{"role": "user", "content": "How many clips?"}]]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokenizers")
    return {"policy": make_tokenizer(root / "policy"), "same": make_tokenizer(root / "same"),
            "other_vocab": make_tokenizer(root / "other_vocab", vocab_size=300),
            "plain": make_tokenizer(root / "plain", chat_template=PLAIN_TEMPLATE)}


def test_only_a_tokenizer_that_reads_alike_takes_the_policys_ids(tokenizers):
    policy = tokenizers["policy"]
    assert reads_alike(policy, tokenizers["same"])
    assert not reads_alike(policy, tokenizers["other_vocab"])
    assert not reads_alike(policy, tokenizers["plain"])
    assert not reads_alike(policy, tokenizers["same"], chat_template=PLAIN_TEMPLATE)


@pytest.mark.parametrize("judge, template", [("other_vocab", None), ("same", PLAIN_TEMPLATE)])
def test_prompt_and_response_are_encoded_again_as_the_reward_model_reads_them(tokenizers, judge, template):
    policy, judge = tokenizers["policy"], tokenizers[judge]
    texts = ["The answer is #### 5", "48 clips"]
    # The first response ended with the policy's eos, the second was cut at the length limit.
    responses = [torch.tensor(policy(texts[0], add_special_tokens=False)["input_ids"] + [policy.eos_token_id]),
                 torch.tensor(policy(texts[1], add_special_tokens=False)["input_ids"])]
    encoded = Retemplate(policy, judge, template)(PROMPTS, responses)
    for prompt, text, ids, ended in zip(PROMPTS, texts, encoded, (True, False)):
        rendered = judge.apply_chat_template(prompt, chat_template=template, add_generation_prompt=True,
                                             tokenize=False)
        assert rendered == (prompt[0]["content"] if template else f"<|im_start|>user\n{prompt[0]['content']}"
                            "<|im_end|>\n<|im_start|>assistant\n")
        expected = [*judge(rendered, add_special_tokens=False)["input_ids"],
                    *judge(text, add_special_tokens=False)["input_ids"], *[judge.eos_token_id] * ended]
        assert ids.tolist() == expected
    assert judge.chat_template != PLAIN_TEMPLATE  # the override is the reward model's copy's alone
