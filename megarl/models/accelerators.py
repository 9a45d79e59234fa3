"""Which optional accelerators are installed (used when present, never required)."""

from __future__ import annotations

import functools
import importlib.util


@functools.cache  # asked per packed micro-batch; the answer cannot change within a process
def transformer_engine_available() -> bool:
    return importlib.util.find_spec("transformer_engine") is not None
