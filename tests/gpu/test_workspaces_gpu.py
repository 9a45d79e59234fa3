"""GPU: a GEMM's first run on a thread takes cuBLAS's workspace from torch's allocator and keeps it; taken after a
large block was freed it pins that block's segment, taken first (parallel/workspaces.py, as every worker process
does) it does not. Each case runs in a fresh process: workspaces live as long as their process."""

import subprocess
import sys

import pytest
import torch

from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the device machines)")

GIB = 2**30
PINNED_AFTER_A_FREED_GIB = """
import sys, torch
from parallel.workspaces import reserve_gemm_workspaces
if sys.argv[1] == "reserved":
    reserve_gemm_workspaces()
torch.cuda.synchronize(); torch.cuda.empty_cache()
before = torch.cuda.memory_reserved()
big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
del big  # a free 1 GiB block in the cache
weight = torch.ones(64, 64, device="cuda", requires_grad=True)
(weight @ weight).sum().backward()  # this thread's and the backward thread's first GEMMs, unless reserved
del weight
torch.cuda.synchronize(); torch.cuda.empty_cache()
print(torch.cuda.memory_reserved() - before)
"""


def held_after_empty_cache(case: str) -> int:
    proc = subprocess.run([sys.executable, "-c", PINNED_AFTER_A_FREED_GIB, case], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return int(proc.stdout.split()[-1])


def test_workspaces_taken_first_pin_nothing():
    assert held_after_empty_cache("late") >= GIB  # the workspaces sit in the freed block: all of it stays reserved
    assert held_after_empty_cache("reserved") < 64 * 2**20
