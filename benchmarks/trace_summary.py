"""Summarise a worker's Chrome trace from `trainer.profile_steps` (parallel/profiler.py): for each role call (the
`actor.update_actor`-style ranges), its wall time, the GPU kernel time inside it, the host-device synchronisations
and copies inside it, its kernel launches, and its longest kernels, CPU ops and CUDA runtime calls (cudaMalloc and
cudaFree show where the caching allocator was emptied). Traces of a real step run to hundreds of MB; this prints a
few lines per call.

    python benchmarks/trace_summary.py OUTPUT_DIR/profile/step_3/rank_00000.json [--top 8] [--out summary.json]
        [--callers aten::index]

`--callers OP` also prints, for a CPU op or CUDA runtime call (cudaMalloc, cudaFree) that costs more than it should,
the ops and ranges that enclose it (the innermost few, by total time): where in the model, the loss or the optimizer it
is called.

`--launchers` prints, for the longest kernels of the whole trace, the host ops that launched them (the innermost few,
by kernel time): which line of the model a slow elementwise or copy kernel comes from.

`--whole` summarises the whole trace as one call, `trace.all`: for a trace without role calls, such as that of an
SGLang scheduler (`step_k/engine-TP-0.trace.json.gz`).

`--gaps` prints, per role call, how long the GPU sat idle inside it (before its first kernel, between kernels, after
its last) and what the host was running in the middle of each idle stretch (the innermost few ops), by total time:
the host work a faster GPU would still wait for.
"""

from __future__ import annotations

import argparse
import bisect
import gzip
import json
from collections import defaultdict
from pathlib import Path

# cuBLASLt launches its GEMMs through the driver API (cuLaunchKernelEx), which the profiler files as `cuda_driver`.
API = ("cuda_runtime", "cuda_driver")
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
COPIES = ("cudaMemcpyAsync", "cudaMemcpy")


def load(path: Path, whole: bool = False) -> list[dict]:
    """The trace's complete events (a .gz too: SGLang's); with `whole`, one range over all of them, named as a role
    call (`trace.all`): for a process without role calls, such as an engine's scheduler."""
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    events = [e for e in json.loads(text)["traceEvents"] if e.get("ph") == "X"]
    if whole and events:
        start, end = min(e["ts"] for e in events), max(e["ts"] + e["dur"] for e in events)
        events.append({"ph": "X", "cat": "user_annotation", "name": "trace.all", "ts": start, "dur": end - start})
    return events


def role_calls(events: list[dict]) -> list[dict]:
    return sorted((e for e in events if e.get("cat") == "user_annotation" and "." in e.get("name", "")
                   and e["name"].split(".")[0] in ("actor", "critic", "reference", "rollout", "reward_model",
                                                   "trace")), key=lambda e: e["ts"])


def summarise(events: list[dict], top: int) -> list[dict]:
    calls = role_calls(events)
    starts = [c["ts"] for c in calls]
    # A kernel belongs to the call whose CPU range launched it: the launch's correlation id links the two.
    launch_ts = {correlation: e["ts"] for correlation, e in _launches(events).items()}
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
        if cat in API:
            runtime[i][name] += e["dur"] / 1e3
            per_call[i]["launches"] += name.startswith(("cudaLaunchKernel", "cuLaunchKernel"))
        if cat in API and name in SYNCS:
            per_call[i]["syncs"] += 1
            per_call[i]["sync_ms"] += e["dur"] / 1e3
        elif cat in API and name in COPIES:
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
    """The chains of the 3 innermost CPU ops or ranges enclosing each `op` event (a CPU op or a CUDA runtime call,
    e.g. cudaFree) on its thread, by total time."""
    totals = defaultdict(float)
    for thread in _threads(events, ("cpu_op", "user_annotation", "python_function", *API)).values():
        open_ranges: list[dict] = []
        for e in thread:
            while open_ranges and open_ranges[-1]["ts"] + open_ranges[-1]["dur"] < e["ts"] + e["dur"]:
                open_ranges.pop()
            if e["name"] == op:
                chain = " < ".join(r["name"][:60] for r in reversed(open_ranges[-3:]))
                totals[chain] += e["dur"] / 1e3
            open_ranges.append(e)
    return [[chain, round(ms, 1)] for chain, ms in sorted(totals.items(), key=lambda x: -x[1])[:top]]


def _chains_at(thread: list[dict], times: list[float], depth: int = 3) -> list[str]:
    """For each of `times` (sorted), the innermost `depth` ops or ranges of `thread` (sorted by start) open then."""
    out, open_ranges, i = [], [], 0
    for t in times:
        while i < len(thread) and thread[i]["ts"] <= t:
            open_ranges.append(thread[i])
            i += 1
        open_ranges = [r for r in open_ranges if r["ts"] + r["dur"] >= t]
        out.append(" < ".join(r["name"][:60] for r in reversed(open_ranges[-depth:])) or "(no op)")
    return out


def _host_chains(threads: dict[tuple, list[dict]], moments: list[tuple]):
    """Per (host thread, time, payload) of `moments`: the payload and the innermost ops open on that thread then."""
    by_thread = defaultdict(list)
    for thread, time, payload in moments:
        by_thread[thread].append((time, payload))
    for thread, items in by_thread.items():
        items.sort(key=lambda item: item[0])
        yield from zip((payload for _, payload in items), _chains_at(threads[thread], [time for time, _ in items]))


def _launches(events: list[dict]) -> dict[int, dict]:
    """Each kernel launch (a runtime or driver API call) by its correlation id, which its kernel carries too."""
    return {e["args"]["correlation"]: e for e in events if e.get("cat") in API and "correlation" in e.get("args", {})}


def _threads(events: list[dict], cats=("cpu_op", "user_annotation")) -> dict[tuple, list[dict]]:
    """Each host thread's events of the categories `cats`, by start (an enclosing range before what it encloses)."""
    threads = defaultdict(list)
    for e in events:
        if e.get("cat") in cats:
            threads[(e.get("pid"), e.get("tid"))].append(e)
    for thread in threads.values():
        thread.sort(key=lambda e: (e["ts"], -e["dur"]))
    return threads


def launchers(events: list[dict], top: int) -> list[list]:
    """The `top` kernels by total time, each with its total and the host op chains that launched it, by time."""
    launches = _launches(events)
    launched = [(k, launches[k["args"]["correlation"]]) for k in events
                if k.get("cat") == "kernel" and k.get("args", {}).get("correlation") in launches]
    totals = defaultdict(float)
    for kernel, _ in launched:
        totals[kernel["name"][:80]] += kernel["dur"] / 1e3
    longest = sorted(totals, key=lambda n: -totals[n])[:top]
    chains = {name: defaultdict(float) for name in longest}
    moments = [((launch.get("pid"), launch.get("tid")), launch["ts"], kernel) for kernel, launch in launched
               if kernel["name"][:80] in chains]
    for kernel, chain in _host_chains(_threads(events), moments):
        chains[kernel["name"][:80]][chain] += kernel["dur"] / 1e3
    return [[name, round(totals[name], 1), [[c, round(ms, 1)] for c, ms in sorted(
        chains[name].items(), key=lambda x: -x[1])[:3]]] for name in longest]


def gaps(events: list[dict], top: int, min_ms: float = 0.05) -> list[dict]:
    """Per role call: GPU idle time before the first kernel it launched, between its kernels and after the last,
    and the idle stretches longer than `min_ms` charged to the host ops open at their midpoints."""
    calls = role_calls(events)
    launches = _launches(events)
    threads = _threads(events)
    kernels = sorted((e for e in events if e.get("cat") == "kernel" and e.get("args", {}).get("correlation")
                      in launches), key=lambda e: e["ts"])
    out = []
    for call in calls:
        end = call["ts"] + call["dur"]
        mine = [k for k in kernels if call["ts"] <= launches[k["args"]["correlation"]]["ts"] <= end]
        if not mine:
            continue
        stretches, busy_until = [], mine[0]["ts"] + mine[0]["dur"]
        for kernel in mine[1:]:
            if kernel["ts"] - busy_until > min_ms * 1e3:
                stretches.append((busy_until, kernel["ts"], launches[kernel["args"]["correlation"]]))
            busy_until = max(busy_until, kernel["ts"] + kernel["dur"])
        by_chain = defaultdict(float)
        midpoints = [((launch.get("pid"), launch.get("tid")), (start + stop) / 2, stop - start)
                     for start, stop, launch in stretches]
        for idle, chain in _host_chains(threads, midpoints):
            by_chain[chain] += idle / 1e3
        out.append({"call": call["name"], "wall_ms": round(call["dur"] / 1e3, 1),
                    "idle_before_ms": round((mine[0]["ts"] - call["ts"]) / 1e3, 1),
                    "idle_between_ms": round(sum(b - a for a, b, _ in stretches) / 1e3, 1),
                    "idle_after_ms": round(max(0.0, end - busy_until) / 1e3, 1),
                    "idle_by_host_op_ms": [[c, round(ms, 1)] for c, ms in sorted(by_chain.items(),
                                                                                 key=lambda x: -x[1])[:top]]})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", type=Path)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--callers", action="append", default=[], help="a CPU op whose enclosing ops to print")
    parser.add_argument("--gaps", action="store_true", help="where the GPU sat idle, and the host ops then")
    parser.add_argument("--launchers", action="store_true", help="the host ops that launched the longest kernels")
    parser.add_argument("--whole", action="store_true", help="the whole trace as one call (an engine's scheduler)")
    args = parser.parse_args()
    events = load(args.trace, args.whole)
    summary = summarise(events, args.top)
    for call in summary:
        print(f"{call['call']:<28} wall {call['wall_ms']:>9.1f} ms  kernels {call['kernel_ms']:>9.1f} ms  "
              f"syncs {call['syncs']:>5} ({call['sync_ms']:.1f} ms)  copies {call['copies']}  "
              f"launches {call['launches']}")
    for op in args.callers:
        print(f"== {op}: enclosing ops, ms")
        for chain, ms in callers(events, op, args.top):
            print(f"{ms:>9.1f}  {chain}")
    idle = gaps(events, args.top) if args.gaps else []
    for call in idle:
        print(f"== {call['call']}: GPU idle {call['idle_before_ms']} ms before, {call['idle_between_ms']} ms between, "
              f"{call['idle_after_ms']} ms after its kernels; host ops then, ms")
        for chain, ms in call["idle_by_host_op_ms"]:
            print(f"{ms:>9.1f}  {chain}")
    launched_by = launchers(events, args.top) if args.launchers else []
    for name, ms, chains in launched_by:
        print(f"== {name}: {ms} ms, launched by")
        for chain, chain_ms in chains:
            print(f"{chain_ms:>9.1f}  {chain}")
    if args.out:
        args.out.write_text(json.dumps({"calls": summary, "gaps": idle, "launchers": launched_by}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
