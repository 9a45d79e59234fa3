"""A benchmark's training run as a process of its own: its output goes to a log file, not a pipe (the engine's
processes can outlive a killed run and would hold a pipe open, so reading it would never end), and the run's whole
process group is killed when a time limit passes or when the benchmark itself is stopped (SIGTERM, as `timeout`
sends): a run left behind would keep its GPU memory through the next one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _stop(signum, frame) -> None:
    raise SystemExit(128 + signum)


def output_dir(overrides: list[str]) -> Path:
    """The run's `trainer.output_dir`, from its overrides."""
    return Path(next(o.split("=", 1)[1] for o in overrides if o.startswith("trainer.output_dir=")))


def run_logged(cmd: list[str], out_dir: Path, time_limit: float | None = None, env: dict | None = None
               ) -> tuple[int | str, str]:
    """Run `cmd` in the repository, importable, with `env` added to this environment and its stdout and stderr in
    `out_dir`/run.log; after `time_limit` seconds kill its process group (exit code "timeout"). Returns the exit code
    and the log's last 11,000 characters."""
    log = out_dir / "run.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **(env or {})}
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop) if main else None
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, text=True, env=env,
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


def finished_run(code: int | str, tail: str, out_dir: Path) -> list[dict]:
    """The metrics of a run that ended well; else its output's tail, and the benchmark stops."""
    if code != 0:
        print(tail)
        raise SystemExit(f"the run in {out_dir} ended with {code} (its whole output: {out_dir / 'run.log'})")
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
