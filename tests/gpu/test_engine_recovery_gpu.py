"""GPU (one GPU, SGLang): the engine's scheduler process is killed (SIGKILL) once the first step is logged; SGLang's
watchdog signals the trainer's process, the engine is marked dead, the next call into it fails with EngineDied, and
the rollout role builds a new engine, streams the actor's current weights into it and runs the call again. The run
(GRPO, random-weight Qwen2.5-0.5B, three steps) ends normally with `rollout/engine_restarts` 1 and the engine/trainer
log-prob gate passing after the restart (so the new engine serves the trained weights).

Rows for benchmarks/results/ go to $MEGARL_RESULTS_DIR/engine_recovery.json when it is set."""

import json
import subprocess
import time

import pytest
import torch

from tests.gpu.test_recipes_gpu import one_gpu_grpo_command, read_metrics, record, wait_for_step_one
from tests.helpers import GPU0_ENV, REPO_ROOT

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA and SGLang (the device machines)")


def kill_the_scheduler_after_step_one(proc: subprocess.Popen, metrics, timeout_s: float = 600) -> float:
    """SIGKILL the SGLang scheduler once step 1 is logged; when (time.time())."""
    wait_for_step_one(proc, metrics, timeout_s)
    killed = subprocess.run(["pkill", "-9", "-f", "sglang::scheduler"], capture_output=True)
    assert killed.returncode == 0, "no SGLang scheduler process to kill"
    return time.time()


def test_a_killed_scheduler_is_replaced_and_the_run_goes_on(tmp_path):
    out = tmp_path / "run"
    cmd = one_gpu_grpo_command(tmp_path, out, "data.max_response_length=512", "trainer.total_training_steps=3",
                           "rollout.max_logprob_mult_error=1.05")
    with open(tmp_path / "console.log", "w") as console:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=console, stderr=subprocess.STDOUT, text=True, env=GPU0_ENV)
        try:
            killed_at = kill_the_scheduler_after_step_one(proc, out / "metrics.jsonl")
            code = proc.wait(timeout=900)
        finally:
            proc.kill()
    log = (tmp_path / "console.log").read_text()
    steps = read_metrics(out / "metrics.jsonl") if (out / "metrics.jsonl").exists() else []
    recovered = [line for line in log.splitlines() if "rollout engine died during" in line]
    record({"what": "engine-recovery", "command": "MEGARL_RESULTS_DIR=$OUT python -m pytest "
            "tests/gpu/test_engine_recovery_gpu.py", "model_shape": "qwen2.5-0.5b", "random_init": True,
            "exit_code": code, "killed_at": killed_at, "recovery_lines": recovered,
            "engine_restarts": [s.get("rollout/engine_restarts") for s in steps],
            "logprob_mult_error": [s.get("rollout/logprob_mult_error") for s in steps],
            "step_s": [s.get("timing_s/step") for s in steps], "update_weights_s": [s.get("timing_s/update_weights")
                                                                                    for s in steps]},
           "engine_recovery.json")
    assert code == 0, log[-6000:]
    assert len(recovered) == 1, log[-6000:]
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert [s["rollout/engine_restarts"] for s in steps] == [0, 1, 1], json.dumps(steps)[:3000]
