"""A run stopped by SIGTERM (`kill`, a SLURM time limit or preemption) shuts its workers down and ends with one
line saying so, exit code 143 (128 + SIGTERM), not an abort."""

import signal
import subprocess
import sys
import time

from tests.helpers import ENV, REPO_ROOT, overrides


def test_sigterm_mid_run_ends_with_one_line(setup, tmp_path):
    out = tmp_path / "run"
    args = overrides(setup, out, "trainer.total_training_steps=500", "rollout.max_logprob_mult_error=null")
    log = tmp_path / "stderr.txt"  # a file, not a pipe: a full pipe would stall the run
    with open(log, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "megarl.train", *args], cwd=REPO_ROOT, env=ENV,
                                stdout=subprocess.DEVNULL, stderr=stderr)
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.is_file() and metrics.read_text().count("\n") >= 2) and proc.poll() is None:
        assert time.monotonic() < deadline, "the run logged no step in 300 s"
        time.sleep(1)
    assert proc.poll() is None, log.read_text()[-3000:]
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    err = log.read_text()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("error: stopped by SIGTERM"), err[-3000:]
