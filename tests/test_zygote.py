"""tests/zygote: the processes tests start with tests.helpers.ENV run as forks of the server conftest.py starts, and
behave as the processes they replace: arguments, working directory, environment, torch's thread count, exit status,
signals; a copy ends with the process that asked for it, even one whose Python threads cannot run."""

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.helpers import ENV, REPO_ROOT, UNFORKED_ENV, run_command

PROBE = str(REPO_ROOT / "tests" / "zygote" / "probe.py")
pytestmark = pytest.mark.skipif("MEGARL_TEST_ZYGOTE" not in ENV, reason="the fork server is off (MEGARL_TEST_ZYGOTE=0)")


def test_a_forked_copy_runs_as_the_process_it_replaces(tmp_path):
    env = {**ENV, "PROBE_MARKER": "seen", "OMP_NUM_THREADS": "1"}
    proc = run_command([sys.executable, PROBE, "report", "3"], timeout=60, cwd=tmp_path, env=env)
    assert proc.returncode == 3, proc.stderr
    report = json.loads(proc.stdout)
    # run_command starts the asker in a session of its own; the copy leads a process group of its own too, not the
    # server's: Ray kills the group of a worker process that exits.
    assert report == {"preloaded": True, "argv": ["report", "3"], "cwd": str(tmp_path), "marker": "seen",
                      "threads": 1, "group_leader": True}
    unforked = run_command([sys.executable, PROBE, "report", "0"], timeout=60, env=UNFORKED_ENV)
    assert json.loads(unforked.stdout)["preloaded"] is False


def test_a_ray_worker_of_a_forked_process_is_a_copy_too():
    """The server leaves Ray unimported: its native core reads its settings from the environment at import, and the
    worker's are its own (its job's number among them). Ray gives the one-CPU actor one thread, as to a fresh one."""
    proc = run_command([sys.executable, PROBE, "ray"], timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"preloaded": True, "threads": 1}


def test_multiprocessing_children_of_a_forked_process_are_copies_too():
    """A spawned child and a forkserver import the parent's main module again: they fork with the descriptors
    multiprocessing passed them (the queue's pipes reach the parent)."""
    proc = run_command([sys.executable, PROBE, "multiprocessing"], timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {method: (r["preloaded"], r["exitcode"]) for method, r in reports.items()} == {
        "spawn": (True, 0), "forkserver": (True, 0)}


def test_signals_reach_the_copy_and_the_copy_ends_with_its_asker():
    for sent, status in ((signal.SIGTERM, 7), (signal.SIGKILL, -signal.SIGKILL)):
        asker = subprocess.Popen([sys.executable, PROBE, "wait"], env=ENV, stdout=subprocess.PIPE, text=True)
        copy = psutil.Process(int(asker.stdout.readline()))
        assert copy.pid != asker.pid
        asker.send_signal(sent)
        assert asker.wait(timeout=30) == status
        assert ends(copy), sent


def test_a_copy_that_holds_the_gil_still_ends_with_its_asker():
    asker = subprocess.Popen([sys.executable, PROBE, "hold"], env=ENV, stdout=subprocess.PIPE, text=True)
    copy = psutil.Process(int(asker.stdout.readline()))
    asker.kill()
    asker.wait(timeout=30)
    assert ends(copy)


def ends(copy: psutil.Process, within_s: float = 30) -> bool:
    deadline = time.monotonic() + within_s
    while copy.is_running() and copy.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
        time.sleep(0.1)
    return not copy.is_running() or copy.status() == psutil.STATUS_ZOMBIE
