"""Summarise a worker's Chrome trace from `trainer.profile_steps` (parallel/profiler.py): for each role call (the
`actor.update_actor`-style ranges), its wall time, the GPU kernel time inside it, the host-device synchronisations
and copies inside it, its kernel launches, and its longest kernels, CPU ops and CUDA runtime calls (cudaMalloc and
cudaFree show where the caching allocator was emptied). Traces of a real step run to hundreds of MB; this prints a
few lines per call.

    python benchmarks/trace_summary.py OUTPUT_DIR/profile/step_3/rank_00000.json [--top 8] [--out summary.json]
        [--callers aten::index]

`--callers OP` also prints, for a CPU op that costs more than it should, the ops and ranges that enclose it (the
innermost few, by total time): where in the model, the loss or the optimizer it is called.
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
    runtime = [defaultdict(float) for _ in calls]

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
        if cat == "cuda_runtime":
            runtime[i][name] += e["dur"] / 1e3
            per_call[i]["launches"] += name.startswith("cudaLaunchKernel") or name == "cuLaunchKernel"
        if cat == "cuda_runtime" and name in SYNCS:
            per_call[i]["syncs"] += 1
            per_call[i]["sync_ms"] += e["dur"] / 1e3
        elif cat == "cuda_runtime" and name in COPIES:
            per_call[i]["copies"] += 1
        elif cat == "cpu_op" and name.startswith("aten::"):
            ops[i][name] += e["dur"] / 1e3
    out = []
    for call, stats, k, o, r in zip(calls, per_call, kernels, ops, runtime):
        longest = lambda d: [[n, round(ms, 1)] for n, ms in sorted(d.items(), key=lambda x: -x[1])[:top]]  # noqa
        out.append({"call": call["name"], "wall_ms": round(call["dur"] / 1e3, 1),
                    "kernel_ms": round(stats["kernel_ms"], 1), "syncs": int(stats["syncs"]),
                    "sync_ms": round(stats["sync_ms"], 1), "copies": int(stats["copies"]),
                    "launches": int(stats["launches"]),
                    "top_kernels_ms": longest(k), "top_cpu_ops_ms": longest(o),
                    "top_runtime_ms": longest(r)})
    return out


def callers(events: list[dict], op: str, top: int) -> list[list]:
    """The chains of the 3 innermost CPU ops or ranges enclosing each `op` event on its thread, by total time."""
    by_thread = defaultdict(list)
    for e in events:
        if e.get("cat") in ("cpu_op", "user_annotation", "python_function"):
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    totals = defaultdict(float)
    for thread in by_thread.values():
        thread.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ranges: list[dict] = []
        for e in thread:
            while open_ranges and open_ranges[-1]["ts"] + open_ranges[-1]["dur"] < e["ts"] + e["dur"]:
                open_ranges.pop()
            if e["name"] == op:
                chain = " < ".join(r["name"][:60] for r in reversed(open_ranges[-3:]))
                totals[chain] += e["dur"] / 1e3
            open_ranges.append(e)
    return [[chain, round(ms, 1)] for chain, ms in sorted(totals.items(), key=lambda x: -x[1])[:top]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--callers", action="append", default=[], help="a CPU op whose enclosing ops to print")
    args = parser.parse_args()
    events = load(args.trace)
    summary = summarise(events, args.top)
    for call in summary:
        print(f"{call['call']:<28} wall {call['wall_ms']:>9.1f} ms  kernels {call['kernel_ms']:>9.1f} ms  "
              f"syncs {call['syncs']:>5} ({call['sync_ms']:.1f} ms)  copies {call['copies']}  launches {call['launches']}")
    for op in args.callers:
        print(f"== {op}: enclosing ops, ms")
        for chain, ms in callers(events, op, args.top):
            print(f"{ms:>9.1f}  {chain}")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
