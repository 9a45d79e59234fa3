"""A reward model's inputs when it reads text differently from the policy (another tokenizer, another chat template):
each response is decoded with the policy's tokenizer and the prompt + response encoded again with the reward
model's, as `megarl rm` encodes its training data (megarl/data/ranking_dataset.py): the prompt through the chat
template with the generation prompt, then the response text, then the reward model's eos where the policy's
response ended with its own (a response cut at the length limit stays without one)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from megarl.data.dataset import encode_prompt


@dataclass(frozen=True)
class RetemplateSource:
    """What the reward-model role re-encodes with: the policy's tokenizer (to decode responses) and, optionally, a
    chat template replacing the reward model's own."""

    policy_tokenizer: str
    chat_template: Optional[str] = None
    trust_remote_code: bool = False

    def build(self, judge_path: str) -> Retemplate:
        from transformers import AutoTokenizer

        policy, judge = (AutoTokenizer.from_pretrained(path, trust_remote_code=self.trust_remote_code)
                         for path in (self.policy_tokenizer, judge_path))
        return Retemplate(policy, judge, self.chat_template)


def retemplate_source(policy_tokenizer: str, judge_path: str, chat_template: Optional[str] = None,
                      trust_remote_code: bool = False) -> Optional[RetemplateSource]:
    """None where the reward model reads the policy's token ids as they are, else what re-encodes them."""
    source = RetemplateSource(policy_tokenizer, chat_template, trust_remote_code)
    retemplate = source.build(judge_path)
    return None if reads_alike(retemplate.policy, retemplate.judge, chat_template) else source


def reads_alike(policy, judge, chat_template: Optional[str] = None) -> bool:
    """Whether the reward model can score the policy's token ids as they are: the same vocabulary, the same chat
    template (and no template set for the reward model alone), the same eos."""
    return (chat_template is None and policy.get_vocab() == judge.get_vocab()
            and getattr(policy, "chat_template", None) == getattr(judge, "chat_template", None)
            and policy.eos_token_id == judge.eos_token_id)


class Retemplate:
    """Policy token ids → the reward model's token ids for the same prompt and response text."""

    def __init__(self, policy, judge, chat_template: Optional[str] = None):
        if chat_template is not None:
            judge = copy.copy(judge)
            judge.chat_template = chat_template
        if judge.eos_token_id is None:
            raise ValueError("the reward model's tokenizer has no eos token to end responses with")
        self.policy, self.judge = policy, judge

    def __call__(self, raw_prompts: Sequence, responses: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """`responses`: each sample's response token ids (policy tokenizer), unpadded."""
        out = []
        for i, (prompt, response) in enumerate(zip(raw_prompts, responses)):
            ids = response.tolist()
            ended = bool(ids) and ids[-1] == self.policy.eos_token_id
            text = self.policy.decode(ids, skip_special_tokens=True)
            tokens = encode_prompt(self.judge, prompt, f"sample {i}'s prompt")
            tokens += self.judge(text, add_special_tokens=False)["input_ids"] + [self.judge.eos_token_id] * ended
            out.append(torch.tensor(tokens, dtype=torch.long))
        return out
