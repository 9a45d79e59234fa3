"""benchmarks/recipe_process.py: a run's output lands in its log, and a time limit ends the run's whole session,
children that outlive it included, without waiting on them."""

import sys
import time
from pathlib import Path

from tests.helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from recipe_process import run_logged  # noqa: E402


def test_the_log_holds_the_output_and_the_exit_code_comes_back(tmp_path):
    code, tail = run_logged(["bash", "-c", "echo out; echo err >&2; exit 3"], tmp_path / "run")
    assert code == 3 and tail.split() == ["out", "err"]
    assert (tmp_path / "run/run.log").read_text() == tail


def test_a_time_limit_kills_the_session_a_child_included(tmp_path):
    # The grandchild keeps the output open after its parent: a pipe read to its end would wait the full 60 s.
    script = "(sleep 60; echo late) & echo started; sleep 60"
    start = time.monotonic()
    code, tail = run_logged(["bash", "-c", script], tmp_path, time_limit=1)
    assert code == "timeout" and tail.strip() == "started"
    assert time.monotonic() - start < 10
    time.sleep(0.5)
    assert "late" not in (tmp_path / "run.log").read_text()


def test_a_stopped_benchmark_takes_its_run_along(tmp_path):
    """`timeout` stops the benchmark with SIGTERM; its run, in a session of its own, must not live on."""
    import signal
    import subprocess

    pid_file = tmp_path / "run.pid"
    benchmark = (f"import sys; sys.path.insert(0, {str(REPO_ROOT / 'benchmarks')!r})\n"
                 "from pathlib import Path\nfrom recipe_process import run_logged\n"
                 f"run_logged(['bash', '-c', 'echo $$ > {pid_file}; sleep 60'], Path({str(tmp_path)!r}))\n")
    proc = subprocess.Popen([sys.executable, "-c", benchmark])
    deadline = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    run_pid = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 128 + signal.SIGTERM
    assert not running(run_pid), "the run outlived the benchmark"


def running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
