"""benchmarks/memory_snapshot.py on a snapshot in torch's format, built by hand (the GPU test,
tests/gpu/test_profiler_gpu.py, reads one the allocator wrote)."""

import sys

import pytest

from tests.helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from memory_snapshot import summarise  # noqa: E402

MIB = 2**20
GIB = 2**30


def frame(name, filename="/work/megarl/workers/actor.py"):
    return {"filename": filename, "line": 7, "name": name}


def block(size, state, name="x"):
    return {"size": size, "requested_size": size, "address": 0, "state": state, "frames": [frame(name)]}


def segment(blocks):
    total = sum(b["size"] for b in blocks)
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    return {"total_size": total, "allocated_size": allocated, "active_size": allocated, "segment_type": "large",
            "blocks": blocks, "address": 0, "stream": 0}


def event(action, size, name="x"):
    return {"action": action, "size": size, "addr": 0, "stream": 0, "frames": [frame(name)]}


def test_pinned_releasable_and_growth_while_cached():
    # A 2 GiB block and a 1.5 GiB one are freed; a 2 MiB tensor made beside the first pins its segment; the
    # 3 GiB logits then need a segment of their own although 3.5 GiB lie unused, in two pieces.
    snapshot = {
        "segments": [segment([block(2 * MIB, "active_allocated", "keep_metrics"), block(2 * GIB, "inactive")]),
                     segment([block(GIB + GIB // 2, "inactive")]),
                     segment([block(3 * GIB, "active_allocated", "logits")])],
        "device_traces": [[
            event("segment_alloc", 2 * GIB + 2 * MIB), event("alloc", 2 * GIB), event("alloc", 2 * MIB, "keep_metrics"),
            event("segment_alloc", GIB + GIB // 2), event("alloc", GIB + GIB // 2),
            event("free_requested", 2 * GIB), event("free_completed", 2 * GIB),
            event("free_completed", GIB + GIB // 2),
            event("segment_alloc", 3 * GIB, "logits"), event("alloc", 3 * GIB, "logits"),
        ]],
    }
    summary = summarise(snapshot, top=8)
    held = summary["held"]
    assert held["reserved_gib"] == pytest.approx(6.5 + 2 / 1024)
    assert held["allocated_gib"] == pytest.approx(3 + 2 / 1024)
    assert held["releasable_gib"] == pytest.approx(1.5)
    assert held["pinned_unused_gib"] == pytest.approx(2)
    assert summary["pinned"] == [{"segment_gib": pytest.approx(2 + 2 / 1024), "unused_gib": pytest.approx(2),
                                  "live": [{"mib": 2.0, "state": "active_allocated",
                                            "where": "actor.py:7:keep_metrics"}]}]
    grown = summary["growth_while_cached"]
    assert [(row["segment_gib"], row["where"]) for row in grown] == [(3, "actor.py:7:logits")]
    assert grown[0]["unused_gib"] == pytest.approx(3.5) and grown[0]["reserved_gib"] == pytest.approx(3.5 + 2 / 1024)
