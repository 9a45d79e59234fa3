"""Test helpers: real (tiny) artifacts made in the test, never downloaded."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("MEGARL_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def make_tokenizer(out_dir: Path, corpus: list[str] | None = None, vocab_size: int = 400):
    """Train a byte-level BPE tokenizer with a ChatML chat template, save_pretrained it, load it back."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    corpus = corpus or [
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
        "How many clips did Natalia sell altogether in April and May? #### 72",
        "Let's think step by step and output the final answer after \"####\".",
        "The answer is \\boxed{\\frac{1}{2}} 0 1 2 3 4 5 6 7 8 9 + - * / = ,",
    ] * 4
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHATML_TEMPLATE
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out_dir)
    return AutoTokenizer.from_pretrained(out_dir)
