"""Test helpers: real (tiny) artifacts made in the test, never downloaded."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("MEGARL_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def make_tokenizer(out_dir: Path, corpus: list[str] | None = None, vocab_size: int = 400):
    """A byte-level BPE tokenizer with a ChatML chat template, saved in `out_dir` and loaded back."""
    from megarl.models.tokenizer import DEFAULT_CORPUS, build_tokenizer

    return build_tokenizer(out_dir, corpus or DEFAULT_CORPUS[:3] + (DEFAULT_CORPUS[4],), vocab_size)


def make_chat_model(out_dir: Path, seed: int = 0) -> Path:
    """A 2-layer Qwen2 with random weights and the ChatML tokenizer of `make_tokenizer`, saved in `out_dir`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = make_tokenizer(out_dir)
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    Qwen2ForCausalLM(config).save_pretrained(out_dir)
    return out_dir
