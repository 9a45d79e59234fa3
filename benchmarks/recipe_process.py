"""A benchmark's training run as a process of its own: its output goes to a log file, not a pipe (the engine's
processes can outlive a killed run and would hold a pipe open, so reading it would never end), and the run's whole
process group is killed when a time limit passes or when the benchmark itself is stopped (SIGTERM, as `timeout`
sends): a run left behind would keep its GPU memory through the next one."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path


def _stop(signum, frame) -> None:
    raise SystemExit(128 + signum)


def run_logged(cmd: list[str], log: Path, env: dict, cwd: Path, time_limit: float | None = None
               ) -> tuple[int | str, str]:
    """Run `cmd` with its stdout and stderr in `log`; after `time_limit` seconds kill its process group (exit code
    "timeout"). Returns the exit code and the log's last 11,000 characters."""
    log.parent.mkdir(parents=True, exist_ok=True)
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop) if main else None
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)
        try:
            code: int | str = proc.wait(timeout=time_limit)
        except subprocess.TimeoutExpired:
            code = "timeout"
        finally:
            if main:  # None: a handler installed outside Python, which cannot be put back from here
                signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return code, log.read_text(errors="replace")[-11000:]
