"""Summarise a worker's GPU allocator snapshot from `trainer.profile_tool=torch_memory` (parallel/profiler.py): what
the caching allocator held at the end of the profiled step and why it could not hand it back, and where in the step
it asked CUDA for more memory while it already held enough unused.

    python benchmarks/memory_snapshot.py OUTPUT_DIR/profile/step_1/rank_00000.memory.pickle [--top 8] [--out F.json]

- held: the reservation (every segment), what live tensors take of it, what `torch.cuda.empty_cache()` would hand
  back (segments with no live block) and what it cannot (the unused part of segments that a live block pins);
- pinned segments: the largest of them, each with its live blocks and where they were allocated;
- growth while cached: each time the allocator asked CUDA for a new segment although its unused blocks added up to
  at least that size (so none of them was one piece large enough): the allocation that asked, the reservation and
  the unused memory then, and where it was made. The history covers the profiled step only: blocks allocated before
  it have no stack.
"""

from __future__ import annotations

import argparse
import json
import pickle
from pathlib import Path

GIB = 1024**3
OWN_CODE = ("megarl/", "parallel/", "megatron/", "benchmarks/")


def where(frames: list[dict], depth: int = 3) -> str:
    """The innermost `depth` frames of our own code or megatron's, innermost first."""
    own = [f for f in frames if any(part in f["filename"] for part in OWN_CODE)]
    shown = own[:depth] or frames[:depth]
    return " <- ".join(f"{f['filename'].rsplit('/', 2)[-1]}:{f['line']}:{f['name']}" for f in shown) or "(no stack)"


def held(segments: list[dict]) -> dict:
    reserved = sum(s["total_size"] for s in segments)
    allocated = sum(s["allocated_size"] for s in segments)
    releasable = sum(s["total_size"] for s in segments if s["active_size"] == 0)
    return {"reserved_gib": reserved / GIB, "allocated_gib": allocated / GIB, "releasable_gib": releasable / GIB,
            "pinned_unused_gib": (reserved - allocated - releasable) / GIB}


def pinned(segments: list[dict], top: int) -> list[dict]:
    """Segments that hold live blocks and unused memory, the most unused first, with their live blocks."""
    rows = []
    for segment in segments:
        unused = segment["total_size"] - segment["allocated_size"]
        if segment["active_size"] and unused:
            live = [b for b in segment["blocks"] if b["state"] != "inactive"]
            rows.append({"segment_gib": segment["total_size"] / GIB, "unused_gib": unused / GIB,
                         "live": [{"mib": b["size"] / 2**20, "state": b["state"], "where": where(b.get("frames", []))}
                                  for b in sorted(live, key=lambda b: -b["size"])[:4]]})
    return sorted(rows, key=lambda r: -r["unused_gib"])[:top]


def growth_while_cached(snapshot: dict, top: int) -> list[dict]:
    """New segments asked for while the allocator's unused blocks added up to at least their size. The trace's
    running totals are rebuilt backwards from the end state, since the history starts mid-run."""
    events = [e for trace in snapshot.get("device_traces", []) for e in trace]
    reserved = sum(s["total_size"] for s in snapshot["segments"])
    allocated = sum(s["allocated_size"] for s in snapshot["segments"])
    change = {"alloc": (0, 1), "free_completed": (0, -1), "segment_alloc": (1, 0), "segment_free": (-1, 0)}
    before = []
    for event in reversed(events):
        grow_reserved, grow_allocated = change.get(event["action"], (0, 0))
        reserved -= grow_reserved * event["size"]
        allocated -= grow_allocated * event["size"]
        before.append((reserved, allocated))
    before.reverse()
    rows = []
    for index, event in enumerate(events):
        reserved, allocated = before[index]
        if event["action"] == "segment_alloc" and reserved - allocated >= event["size"]:
            rows.append({"segment_gib": event["size"] / GIB, "reserved_gib": reserved / GIB,
                         "unused_gib": (reserved - allocated) / GIB, "where": where(event.get("frames", []))})
    return sorted(rows, key=lambda r: -r["segment_gib"])[:top]


def summarise(snapshot: dict, top: int) -> dict:
    segments = [s for s in snapshot["segments"] if s.get("segment_type", "large") == "large"]
    return {"held": held(snapshot["segments"]), "pinned": pinned(segments, top),
            "growth_while_cached": growth_while_cached(snapshot, top)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("snapshot", type=Path)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    summary = summarise(pickle.loads(args.snapshot.read_bytes()), args.top)
    h = summary["held"]
    print(f"held: reserved {h['reserved_gib']:.2f} GiB, live tensors {h['allocated_gib']:.2f}, releasable "
          f"{h['releasable_gib']:.2f}, unused but pinned by live blocks {h['pinned_unused_gib']:.2f}")
    for row in summary["pinned"]:
        print(f"pinned segment {row['segment_gib']:.2f} GiB, {row['unused_gib']:.2f} unused; live:")
        for block in row["live"]:
            print(f"    {block['mib']:9.1f} MiB  {block['state']:<20}  {block['where']}")
    for row in summary["growth_while_cached"]:
        print(f"new segment {row['segment_gib']:.2f} GiB with {row['unused_gib']:.2f} of {row['reserved_gib']:.2f} "
              f"GiB unused: {row['where']}")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
