"""The recipe's tokenizer, and tokenizers built locally (nothing can be downloaded here): byte-level BPE trained on
a small corpus, saved with a chat template, for random-weight checkpoints of real model shapes and for the tiny CPU
recipes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from megarl.config.schema import ModelConfig

# Qwen's ChatML roles and special tokens, so recipes written for Qwen read the same prompts.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# The tiny recipes' prompts are bare: a 2-layer model should spend its capacity on the task, not on ChatML.
PLAIN_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# A tokenizer's vocabulary comes from one of: tokenizer.json (fast), tokenizer.model (SentencePiece), or
# vocab.json with merges.txt (byte-level BPE).
VOCABULARY_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt")
PROBE_TEXT = "11+12="  # any tokenizer that has a vocabulary encodes it to some tokens

DEFAULT_CORPUS = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "How many clips did Natalia sell altogether in April and May? #### 72",
    "Let's think step by step and output the final answer after \"####\".",
    "Let's think step by step and output the final answer within \\boxed{}.",
    "The answer is \\boxed{\\frac{1}{2}} 0 1 2 3 4 5 6 7 8 9 + - * / = , . ? ! ( ) [ ] { } ^ _ $ %",
    "What is the value of x if 3x + 4 = 19? Subtract 4 from both sides, then divide by 3: x = 5.",
)


def load_tokenizer(model: ModelConfig):
    """The recipe's tokenizer, once it is known to encode text and to fit the model's vocabulary, with an error that
    names the key to fix. (Without tokenizer files, transformers builds an empty tokenizer from config.json alone,
    which encodes every text to no tokens.)"""
    from transformers import AutoTokenizer

    from megarl.config import ConfigError, read_hf_config

    source = model.tokenizer_path or model.path
    key = "model.tokenizer_path" if model.tokenizer_path else "model.path"
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=model.trust_remote_code)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{key}={source}: no tokenizer could be loaded from there ({e}); point "
                          "model.tokenizer_path at a directory with the tokenizer files") from e
    if not tokenizer(PROBE_TEXT)["input_ids"]:
        raise ConfigError(f"{key}={source}: the tokenizer loaded from there is empty ({PROBE_TEXT!r} encodes to no "
                          f"tokens): it has {_vocabulary_files(Path(source))}: copy them from the model's source, or "
                          "point model.tokenizer_path at a directory that has them")
    vocab_size = (read_hf_config(model.path) or {}).get("vocab_size")
    if vocab_size and len(tokenizer) > vocab_size:
        raise ConfigError(f"{key}={source}: the tokenizer has {len(tokenizer)} tokens, more than the model's "
                          f"vocab_size={vocab_size} ({model.path}/config.json): token ids from {vocab_size} on have "
                          "no embedding; use the model's own tokenizer")
    return tokenizer


def _vocabulary_files(directory: Path) -> str:
    """What of a tokenizer's vocabulary files `directory` lacks, in words."""
    present = [name for name in VOCABULARY_FILES if (directory.expanduser() / name).is_file()]
    if not present:
        return "none of the tokenizer files " + ", ".join(VOCABULARY_FILES[:3]) + " + " + VOCABULARY_FILES[3]
    return f"only {', '.join(present)} of the tokenizer files, which did not load a vocabulary"


def build_tokenizer(out_dir: str | Path, corpus: Sequence[str] = DEFAULT_CORPUS, vocab_size: int = 400,
                    chat_template: str = CHATML_TEMPLATE, special_tokens: Sequence[str] = ()):
    """Train a byte-level BPE tokenizer (every text encodes and decodes exactly), save_pretrained it with
    `<|im_end|>` as EOS and `<|endoftext|>` as padding, and return it loaded back. `special_tokens`: more tokens
    that stay whole (a task's markers)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        list(corpus) * 4,
        trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[*SPECIAL_TOKENS, *special_tokens],
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=chat_template)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out_dir)
    return AutoTokenizer.from_pretrained(out_dir)
