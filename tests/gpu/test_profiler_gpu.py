"""GPU: `trainer.profile_tool=torch_memory` records the CUDA caching allocator (parallel/profiler.py), and
benchmarks/memory_snapshot.py finds in the snapshot the unused memory that a live block pins and a segment asked
for while the cache held enough in pieces."""

import pickle
import sys
from pathlib import Path

import pytest
import torch

from parallel import profiler
from tests.helpers import REPO_ROOT

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the device machines)")
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

MIB = 2**20


def test_memory_snapshot_shows_pinned_cache_and_growth_while_cached(tmp_path):
    from memory_snapshot import summarise

    torch.cuda.empty_cache()
    profiler.start("torch_memory")
    big = torch.empty(100 * MIB, dtype=torch.uint8, device="cuda")
    del big
    pin = torch.empty(2 * MIB, dtype=torch.uint8, device="cuda")  # carved from the freed 100 MiB block
    torch.cuda.empty_cache()  # cannot hand back the segment `pin` lives in
    first, second = (torch.empty(64 * MIB, dtype=torch.uint8, device="cuda") for _ in range(2))
    del first, second  # 128 MiB unused in two pieces beside the pinned 98
    wide = torch.empty(150 * MIB, dtype=torch.uint8, device="cuda")  # no piece is large enough: a new segment
    path = profiler.stop(tmp_path, rank=0)

    assert path == str(tmp_path / "rank_00000.memory.pickle")
    summary = summarise(pickle.loads(Path(path).read_bytes()), top=8)
    pinned = [row for row in summary["pinned"] if any(b["mib"] == 2 for b in row["live"])]
    assert pinned and pinned[0]["unused_gib"] * 1024 == pytest.approx(98, abs=0.1)
    assert "test_memory_snapshot_shows_pinned_cache" in pinned[0]["live"][0]["where"]
    assert pinned[0]["live"][0]["state"] == "active_allocated"
    grown = [row for row in summary["growth_while_cached"] if row["segment_gib"] * 1024 == pytest.approx(150)]
    assert grown and grown[0]["unused_gib"] * 1024 >= 150
    assert summary["held"]["pinned_unused_gib"] * 1024 >= 98
    del pin, wide


def test_the_torch_tool_still_writes_a_chrome_trace(tmp_path):
    profiler.start("torch")
    torch.ones(4, device="cuda").sum().item()
    path = profiler.stop(tmp_path, rank=3)
    assert path == str(tmp_path / "rank_00003.json") and "traceEvents" in Path(path).read_text()
