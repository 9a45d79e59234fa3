"""benchmarks/trace_summary.py on a small Chrome trace made in the test: kernels are charged to the role call that
launched them, runtime calls and launches are counted per call, and `callers` names what encloses an op or a runtime
call."""

import sys

from tests.helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import trace_summary  # noqa: E402


def event(cat, name, ts_ms, dur_ms, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts_ms * 1e3, "dur": dur_ms * 1e3, "pid": 1, "tid": tid,
            "args": args}


EVENTS = [
    event("user_annotation", "critic.update_critic", 0, 1000),
    event("cpu_op", "aten::mul", 10, 100),
    event("cpu_op", "aten::index", 20, 50),
    event("cuda_runtime", "cudaLaunchKernel", 30, 5, correlation=7),
    event("kernel", "gemm", 2000, 20, tid=9, correlation=7),  # runs after the call's range, still its kernel
    event("cuda_runtime", "cudaFree", 300, 40),
    event("cpu_op", "aten::index", 400, 30),
    event("cuda_driver", "cuLaunchKernelEx", 500, 2, correlation=8),  # how cuBLASLt launches its GEMMs
    event("kernel", "nvjet_gemm", 2100, 30, tid=9, correlation=8),
]


def test_a_call_gets_its_kernels_runtime_calls_and_launches():
    [call] = trace_summary.summarise(EVENTS, top=4)
    assert call["call"] == "critic.update_critic" and call["kernel_ms"] == 50 and call["launches"] == 2
    assert dict(call["top_runtime_ms"]) == {"cudaFree": 40, "cudaLaunchKernel": 5, "cuLaunchKernelEx": 2}
    assert dict(call["top_cpu_ops_ms"]) == {"aten::index": 80, "aten::mul": 100}


def test_callers_name_the_enclosing_ops():
    chains = dict(trace_summary.callers(EVENTS, "aten::index", top=4))
    assert chains == {"aten::mul < critic.update_critic": 50, "critic.update_critic": 30}
    assert dict(trace_summary.callers(EVENTS, "cudaFree", top=4)) == {"critic.update_critic": 40}


def test_gaps_charge_idle_gpu_time_to_the_host_ops_running_then():
    events = [
        event("user_annotation", "actor.compute_log_prob", 0, 100),
        event("cpu_op", "aten::mm", 1, 2),
        event("cuda_runtime", "cudaLaunchKernel", 2, 1, correlation=1),
        event("kernel", "gemm", 5, 10, tid=9, correlation=1),
        event("cpu_op", "aten::pin_memory", 20, 30),  # the GPU idles from 15 to 60 while the host pins
        event("cpu_op", "aten::mm", 55, 2),
        event("cuda_runtime", "cudaLaunchKernel", 56, 1, correlation=2),
        event("kernel", "gemm", 60, 10, tid=9, correlation=2),
    ]
    [call] = trace_summary.gaps(events, top=4)
    assert (call["idle_before_ms"], call["idle_between_ms"], call["idle_after_ms"]) == (5, 45, 30)
    assert call["idle_by_host_op_ms"] == [["aten::pin_memory < actor.compute_log_prob", 45]]


def test_launchers_name_the_host_ops_behind_the_longest_kernels():
    [gemm, first] = trace_summary.launchers(EVENTS, top=2)
    assert gemm == ["nvjet_gemm", 30, [["critic.update_critic", 30]]]
    assert first == ["gemm", 20, [["aten::index < aten::mul < critic.update_critic", 20]]]


def test_a_gzipped_trace_without_role_calls_is_summarised_whole(tmp_path):
    import gzip
    import json

    scheduler = [e for e in EVENTS if e["cat"] != "user_annotation"]  # an SGLang scheduler's: no role calls
    path = tmp_path / "engine-TP-0.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": scheduler}).encode()))
    assert trace_summary.summarise(trace_summary.load(path), top=4) == []
    [call] = trace_summary.summarise(trace_summary.load(path, whole=True), top=4)
    assert call["call"] == "trace.all" and call["wall_ms"] == 2120 and call["kernel_ms"] == 50
