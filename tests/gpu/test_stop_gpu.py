"""GPU (one GPU, SGLang, torchrun): SIGTERM to the job (torchrun and its rank, as `kill` or SLURM sends it) mid-run
stops the run with megarl's one line. The engine lives in the rank's own process there, and SGLang's request loop
puts a SIGTERM handler of its own on its event loop (drain, then kill the process); the engine takes the signal
back, holds one that arrives during a call until its loop has returned, and raises it again for megarl's stop.

Rows for benchmarks/results/ go to $MEGARL_RESULTS_DIR/stop_gpu.json when it is set."""

import os
import signal
import subprocess
import time

import pytest
import torch

from tests.gpu.test_recipes_gpu import one_gpu_grpo_command, read_metrics, record, wait_for_step_one
from tests.helpers import GPU0_ENV, REPO_ROOT

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA and SGLang (the device machines)")


def test_sigterm_mid_run_stops_with_one_line(tmp_path):
    out = tmp_path / "run"
    cmd = one_gpu_grpo_command(tmp_path, out, "data.max_response_length=1024", "trainer.total_training_steps=20")
    with open(tmp_path / "console.log", "w") as console:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=console, stderr=subprocess.STDOUT, text=True, env=GPU0_ENV,
                                start_new_session=True)
        try:
            wait_for_step_one(proc, out / "metrics.jsonl")
            os.killpg(proc.pid, signal.SIGTERM)
            signalled = time.monotonic()
            code = proc.wait(timeout=180)
            stop_s = time.monotonic() - signalled
        finally:
            proc.kill()
    log = (tmp_path / "console.log").read_text()
    stops = [line for line in log.splitlines() if line.startswith("error: stopped by SIGTERM")]
    left, gone_s = engine_processes_gone(timeout_s=60)
    steps = read_metrics(out / "metrics.jsonl")
    record({"what": "sigterm-stop", "command": "MEGARL_RESULTS_DIR=$OUT python -m pytest tests/gpu/test_stop_gpu.py",
            "model_shape": "qwen2.5-0.5b", "random_init": True, "launcher": "torchrun", "exit_code": code,
            "stop_s": round(stop_s, 1), "stop_lines": stops, "steps_logged": len(steps),
            "engine_processes_left": len(left), "engine_processes_gone_s": gone_s,
            "console_tail": log.splitlines()[-6:]}, "stop_gpu.json")
    assert len(stops) == 1, log[-6000:]
    assert "failed on rank" not in log, log[-6000:]
    assert not left, f"SGLang processes still there 60 s after the run ended: {left}"


def engine_processes_gone(timeout_s: float) -> tuple[list[str], float]:
    """SGLang's processes (named sglang::…) still alive after `timeout_s`, and how long they took to go: killed with
    the run, they still take a moment to release their GPU."""
    start = time.monotonic()
    while True:
        left = subprocess.run(["pgrep", "-f", "sglang::"], capture_output=True, text=True).stdout.split()
        waited = time.monotonic() - start
        if not left or waited > timeout_s:
            return left, round(waited, 1)
        time.sleep(0.5)
