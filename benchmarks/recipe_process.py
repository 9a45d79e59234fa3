"""A benchmark's training run as a process of its own: its output goes to a log file, not a pipe (the engine's
processes can outlive a killed run and would hold a pipe open, so reading it would never end), and a time limit stops
the whole process session, every child included."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def run_logged(cmd: list[str], log: Path, env: dict, cwd: Path, time_limit: float | None = None
               ) -> tuple[int | str, str]:
    """Run `cmd` with its stdout and stderr in `log`; after `time_limit` seconds kill its session (exit code
    "timeout"). Returns the exit code and the log's last 11,000 characters."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)
        try:
            code: int | str = proc.wait(timeout=time_limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = "timeout"
    return code, log.read_text(errors="replace")[-11000:]
