"""How a megarl process ends: `exit_process(main())` in a command's `__main__`, and in the test suite's workers."""

from __future__ import annotations

import gc
import sys
from typing import NoReturn


def exit_process(code: int | None = 0) -> NoReturn:
    """Exit with `code`. Interpreter teardown runs the cyclic garbage collector over every object the imports made
    (torch, megatron-core, transformers: some 600k), seconds a process on a CPU core, to free memory the operating
    system takes back at exit anyway: frozen first, the heap is skipped. Whatever must reach disk was closed by the
    command itself (files, checkpoints, Ray and the process group), so no finalizer is waited for."""
    gc.freeze()
    sys.exit(code)
