"""benchmarks/trace_summary.py on a small Chrome trace made in the test: kernels are charged to the role call that
launched them, runtime calls and launches are counted per call, and `callers` names what encloses an op."""

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
]


def test_a_call_gets_its_kernels_runtime_calls_and_launches():
    [call] = trace_summary.summarise(EVENTS, top=4)
    assert call["call"] == "critic.update_critic" and call["kernel_ms"] == 20 and call["launches"] == 1
    assert dict(call["top_runtime_ms"]) == {"cudaFree": 40, "cudaLaunchKernel": 5}
    assert dict(call["top_cpu_ops_ms"]) == {"aten::index": 80, "aten::mul": 100}


def test_callers_name_the_enclosing_ops():
    chains = dict(trace_summary.callers(EVENTS, "aten::index", top=4))
    assert chains == {"aten::mul < critic.update_critic": 50, "critic.update_critic": 30}
