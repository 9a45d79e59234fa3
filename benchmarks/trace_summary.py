"""Summarise a worker's Chrome trace from `trainer.profile_steps` (parallel/profiler.py): for each role call (the
`actor.update_actor`-style ranges), its wall time, the GPU kernel time inside it, the host-device synchronisations
and copies inside it, and its longest kernels and CPU ops. Traces of a real step run to hundreds of MB; this prints a
few lines per call.

    python benchmarks/trace_summary.py OUTPUT_DIR/profile/step_3/rank_00000.json [--top 8] [--out summary.json]
"""

from __future__ import annotations

import argparse
import bisect
import json
from collections import defaultdict
from pathlib import Path

SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
COPIES = ("cudaMemcpyAsync", "cudaMemcpy")


def load(path: Path) -> list[dict]:
    return [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]


def role_calls(events: list[dict]) -> list[dict]:
    return sorted((e for e in events if e.get("cat") == "user_annotation" and "." in e.get("name", "")
                   and e["name"].split(".")[0] in ("actor", "critic", "reference", "rollout", "reward_model")),
                  key=lambda e: e["ts"])


def summarise(events: list[dict], top: int) -> list[dict]:
    calls = role_calls(events)
    starts = [c["ts"] for c in calls]
    # A kernel belongs to the call whose CPU range launched it: the launch's correlation id links the two.
    launch_ts = {e["args"]["correlation"]: e["ts"] for e in events
                 if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    per_call = [defaultdict(float) for _ in calls]
    kernels = [defaultdict(float) for _ in calls]
    ops = [defaultdict(float) for _ in calls]

    def owner(ts: float) -> int | None:
        i = bisect.bisect_right(starts, ts) - 1
        return i if i >= 0 and ts <= calls[i]["ts"] + calls[i]["dur"] else None

    for e in events:
        cat, name = e.get("cat"), e.get("name", "")
        ts = launch_ts.get(e.get("args", {}).get("correlation")) if cat == "kernel" else e["ts"]
        i = owner(ts) if ts is not None else None
        if i is None:
            continue
        if cat == "kernel":
            per_call[i]["kernel_ms"] += e["dur"] / 1e3
            kernels[i][name[:80]] += e["dur"] / 1e3
        elif cat == "cuda_runtime" and name in SYNCS:
            per_call[i]["syncs"] += 1
            per_call[i]["sync_ms"] += e["dur"] / 1e3
        elif cat == "cuda_runtime" and name in COPIES:
            per_call[i]["copies"] += 1
        elif cat == "cpu_op" and name.startswith("aten::"):
            ops[i][name] += e["dur"] / 1e3
    out = []
    for call, stats, k, o in zip(calls, per_call, kernels, ops):
        longest = lambda d: [[n, round(ms, 1)] for n, ms in sorted(d.items(), key=lambda x: -x[1])[:top]]  # noqa
        out.append({"call": call["name"], "wall_ms": round(call["dur"] / 1e3, 1),
                    "kernel_ms": round(stats["kernel_ms"], 1), "syncs": int(stats["syncs"]),
                    "sync_ms": round(stats["sync_ms"], 1), "copies": int(stats["copies"]),
                    "top_kernels_ms": longest(k), "top_cpu_ops_ms": longest(o)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    summary = summarise(load(args.trace), args.top)
    for call in summary:
        print(f"{call['call']:<28} wall {call['wall_ms']:>9.1f} ms  kernels {call['kernel_ms']:>9.1f} ms  "
              f"syncs {call['syncs']:>5} ({call['sync_ms']:.1f} ms)  copies {call['copies']}")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
