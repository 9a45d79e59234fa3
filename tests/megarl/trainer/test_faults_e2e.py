"""Faults a user meets, with real runs (slow: two runs of the tiny setup, one under torchrun, one under Ray).

Under torchrun: a second run started in the output directory of a running one is refused in one line naming it,
before it writes anything there (the running one goes on saving checkpoints, whose manifests need every file its
ranks wrote); then one of its ranks is SIGKILLed, after a save, so that megatron's checkpoint writer process is up:
rank 0's last line names the rank that died, and no process of the job is left, the dead rank's helpers included.
Under Ray: a second run started with launch/torchrun.sh is refused the same way, then Ctrl-C pressed three times
(SIGINT to the run's process group, as a terminal sends it) ends the run with one line, exit code 130, no traceback
and nothing left running (Ray's agents included)."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from megarl.run_lock import LOCK_NAME
from megarl.trainer.checkpoint import complete_steps, step_dir
from parallel.topology import free_port
from tests.helpers import (UNFORKED_ENV as ENV, REPO_ROOT, left_running, overrides, process_tree, run_command, wait_for,
                           wait_for_steps)

pytestmark = pytest.mark.timeout(900)
LONG_RUN = ["trainer.total_training_steps=500", "trainer.save_freq=1", "rollout.max_logprob_mult_error=null"]


def start(cmd, log, **popen):
    with open(log, "w") as console:
        return subprocess.Popen(cmd, cwd=REPO_ROOT, env=ENV, stdout=console, stderr=subprocess.STDOUT, **popen)


def holder_of(out) -> dict:
    """The run.lock of `out` once its holder has written it."""
    try:
        return json.loads((out / LOCK_NAME).read_text())
    except (OSError, ValueError):
        return {}


def refusal(out, holder: dict) -> str:
    return (f"error: trainer.output_dir={out} is in use by another run (host {holder['host']}, pid {holder['pid']}, "
            f"since {holder['since']}): let it finish or stop it, or give this run a trainer.output_dir of its own")


def megarl_lines(console: str) -> list[str]:
    """The run's own lines: without torchrun's report of its failed children, which follows them."""
    return [line for line in console.splitlines() if line.startswith(("error:", "note:", "saved checkpoint", "step "))]


@pytest.fixture(scope="module")
def torchrun_faults(setup, tmp_path_factory):
    """The torchrun run, the refused second run's outcome, and what the run left after its rank 1 was killed."""
    tmp = tmp_path_factory.mktemp("torchrun_faults")
    out, log = tmp / "run", tmp / "console.txt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "megarl.train", *overrides(setup, out, *LONG_RUN)]
    proc = start(cmd, log, start_new_session=True)
    try:
        wait_for(lambda: holder_of(out), proc, log, "run.lock")
        holder = holder_of(out)
        second = run_command([sys.executable, "-m", "megarl.train", *overrides(setup, out, "trainer.seed=2")], 120,
                             env=ENV)
        wait_for(lambda: (out / "checkpoints" / "global_step_1").is_dir(), proc, log, "a checkpoint")
        processes = process_tree(proc.pid)  # torchrun, its ranks, their helpers (megatron's checkpoint writer)
        ranks = {p.environ().get("RANK"): p for p in psutil.Process(proc.pid).children()}
        ranks["1"].send_signal(signal.SIGKILL)
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return {"out": out, "holder": holder, "second": second, "console": log.read_text(), "processes": processes,
            "rank_0": ranks["0"].pid}


def test_a_second_run_in_a_running_runs_output_dir_is_refused_naming_it(torchrun_faults):
    out, holder, second = torchrun_faults["out"], torchrun_faults["holder"], torchrun_faults["second"]
    assert (holder["host"], holder["pid"]) == (socket.gethostname(), torchrun_faults["rank_0"])  # it holds the dir
    assert second.returncode == 2, second.stderr[-3000:]
    assert second.stderr.strip().splitlines()[-1] == refusal(out, holder)
    assert "resolved config written" not in second.stdout and "seed: 1" in (out / "config.yaml").read_text()


def test_a_sigkilled_rank_leaves_no_process_and_rank_0_names_it(torchrun_faults):
    console, out = torchrun_faults["console"], torchrun_faults["out"]
    last = step_dir(out / "checkpoints", complete_steps(out / "checkpoints")[-1])
    cause = (f"error: rank 1 on {socket.gethostname()} died (killed or crashed: torchrun's report below has its exit "
             f"code) and torchrun stopped the other ranks; the last checkpoint is {last}: starting the same command "
             "again resumes from it")
    assert [line for line in megarl_lines(console) if line.startswith("error:")] == [cause], console[-5000:]
    assert megarl_lines(console)[-1] == cause
    assert "[rank0]: Traceback" not in console, console[-5000:]
    assert left_running(torchrun_faults["processes"]) == []
    assert not (out / LOCK_NAME).exists()  # rank 0 released the directory on its way out


@pytest.fixture(scope="module")
def ray_ctrl_c(setup, tmp_path_factory):
    """The Ray run stopped by three Ctrl-C, after a second run (launch/torchrun.sh) was refused its directory."""
    tmp = tmp_path_factory.mktemp("ray_ctrl_c")
    out, log = tmp / "run", tmp / "console.txt"
    # A process group of its own in this session, as a shell gives a job: the driver does not lead a session.
    proc = start([sys.executable, "-m", "megarl.train", *overrides(setup, out, *LONG_RUN)], log, process_group=0)
    try:
        wait_for(lambda: holder_of(out), proc, log, "run.lock")
        holder = holder_of(out)
        launch = {**ENV, "PYTHON": sys.executable, "NPROC_PER_NODE": "2", "MASTER_PORT": str(free_port())}
        second = run_command(["bash", "launch/torchrun.sh", *overrides(setup, out)], 120, env=launch)
        wait_for(lambda: (out / "checkpoints" / "global_step_1").is_dir(), proc, log, "a checkpoint")
        wait_for_steps(proc, out / "metrics.jsonl", log, steps=1)
        processes = process_tree(proc.pid)
        for _ in range(3):
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.3)
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return {"out": out, "holder": holder, "second": second, "console": log.read_text(), "processes": processes,
            "driver": proc.pid, "returncode": proc.returncode}


def test_a_second_run_started_by_launch_torchrun_is_refused_before_torchrun_starts(ray_ctrl_c):
    second, out = ray_ctrl_c["second"], ray_ctrl_c["out"]
    assert ray_ctrl_c["holder"]["pid"] == ray_ctrl_c["driver"]  # the Ray driver holds the directory
    assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-3000:]
    assert second.stderr.strip().splitlines() == [refusal(out, ray_ctrl_c["holder"])]


def test_ctrl_c_pressed_three_times_ends_a_ray_run_with_one_line_and_nothing_left(ray_ctrl_c):
    console, out = ray_ctrl_c["console"], ray_ctrl_c["out"]
    last = step_dir(out / "checkpoints", complete_steps(out / "checkpoints")[-1])
    assert ray_ctrl_c["returncode"] == 128 + signal.SIGINT, console[-5000:]
    assert console.strip().splitlines()[-1] == (f"error: stopped by SIGINT (Ctrl-C); the last checkpoint is {last}: "
                                                "starting the same command again resumes from it"), console[-5000:]
    assert "Traceback" not in console and "KeyboardInterrupt" not in console, console[-5000:]
    assert left_running(ray_ctrl_c["processes"]) == []
    assert not (out / LOCK_NAME).exists()
