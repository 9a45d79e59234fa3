"""A run stopped by SIGTERM (`kill`, a SLURM time limit or preemption) shuts its workers down and ends with one
line saying so, exit code 143 (128 + SIGTERM), not an abort."""

import os
import signal
import subprocess
import sys

from parallel.topology import free_port
from tests.helpers import ENV, REPO_ROOT, overrides, wait_for_steps


def test_sigterm_mid_run_ends_with_one_line(setup, tmp_path):
    out = tmp_path / "run"
    args = overrides(setup, out, "trainer.total_training_steps=500", "rollout.max_logprob_mult_error=null")
    log = tmp_path / "stderr.txt"  # a file, not a pipe: a full pipe would stall the run
    with open(log, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "megarl.train", *args], cwd=REPO_ROOT, env=ENV,
                                stdout=subprocess.DEVNULL, stderr=stderr)
    wait_for_steps(proc, out / "metrics.jsonl", log)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    err = log.read_text()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("error: stopped by SIGTERM"), err[-3000:]
    # Python's handler takes it, not Ray's native failure handler (a stack dump, and an abort when that runs long).
    assert "SIGTERM received" not in err, err[-3000:]


def test_sigterm_under_torchrun_is_a_stop_on_every_rank_not_a_failed_call(setup, tmp_path):
    """torchrun forwards the signal to its ranks, where it lands inside a worker call (generation, an update): the
    call must not report it as its own failure ("rollout.generate failed on rank 0 ... Stopped")."""
    out = tmp_path / "run"
    args = overrides(setup, out, "trainer.total_training_steps=500", "rollout.max_logprob_mult_error=null")
    log = tmp_path / "console.txt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "megarl.train", *args]
    with open(log, "w") as console:
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=ENV, stdout=console, stderr=subprocess.STDOUT,
                                start_new_session=True)
    wait_for_steps(proc, out / "metrics.jsonl", log)
    os.killpg(proc.pid, signal.SIGTERM)  # as `kill` of the job or SLURM does: torchrun and its ranks
    proc.wait(timeout=120)
    text = log.read_text()
    stops = [line for line in text.splitlines() if line.startswith("error: stopped by SIGTERM")]
    assert len(stops) == 1, text[-4000:]
    assert "failed on rank" not in text, text[-4000:]
