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
