"""Run a model-written program: in a throwaway directory, walled off (megarl/sandbox/backends.py), under limits of CPU
time, wall time, address space, processes, open files and output size, `config.workers` at a time.

Limits are the kernel's rlimits, set by util-linux's `prlimit` on the sandbox's first process and inherited by
everything it starts; the wall-time limit kills the whole sandbox (its PID namespace dies with its first process).
A program's stdout and stderr go to files the host opened, so RLIMIT_FSIZE caps them as it caps the files it writes.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from megarl.sandbox.backends import COMMANDS, working_backend

if TYPE_CHECKING:
    from megarl.config.schema import SandboxConfig

# Root's programs run as users of their own: one per concurrent run, numbered from here (per megarl process).
_UID_BASE = 200_000
_MAX_OPEN_FILES = 64


@dataclass(frozen=True)
class RunResult:
    """What came of one program: its output (cut at the output limit), its exit status, the limit that stopped it."""

    stdout: str
    stderr: str
    exit_code: Optional[int]  # None: killed at the wall-time limit
    limit: str  # "" (it ended on its own) | wall | cpu | output | memory
    wall_s: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def timed_out(self) -> bool:
        return self.limit in ("wall", "cpu")


@dataclass(frozen=True)
class Program:
    """A Python program and what its stdin reads."""

    code: str
    stdin: str = ""


class Sandbox:
    """Runs Programs under `config`'s limits. Probes its backend at construction (SandboxUnavailable if none works);
    close it (or use it as a context) to remove its directories."""

    def __init__(self, config: SandboxConfig):
        self.config = config
        self.python = config.python or sys.executable
        self._root = Path(tempfile.mkdtemp(prefix="megarl-sandbox-"))
        self._root.chmod(0o711)  # the programs' users reach their own directories in it
        own_users = os.geteuid() == 0
        base = _UID_BASE + (os.getpid() % 100_000) * config.workers
        self._uids: queue.SimpleQueue = queue.SimpleQueue()
        for slot in range(config.workers):
            self._uids.put(base + slot if own_users else None)
        probe = self._workdir(base if own_users else None)
        try:
            self.backend = working_backend(config.backend, probe, base if own_users else None, self.python)
        except Exception:
            self.close()
            raise
        finally:
            shutil.rmtree(probe, ignore_errors=True)
        self._threads = ThreadPoolExecutor(config.workers, thread_name_prefix="sandbox")

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if hasattr(self, "_threads"):
            self._threads.shutdown(wait=True)
        shutil.rmtree(self._root, ignore_errors=True)

    def run_many(self, programs: Sequence[Program]) -> list[RunResult]:
        """Each program's result, `config.workers` running at once."""
        return list(self._threads.map(self.run, programs))

    def run(self, program: Program) -> RunResult:
        """One program in a fresh directory, deleted afterwards."""
        uid = self._uids.get()
        workdir = self._workdir(uid)
        try:
            (workdir / "main.py").write_text(program.code)
            return self._execute(workdir, program.stdin, uid)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            self._uids.put(uid)

    def _workdir(self, uid: Optional[int]) -> Path:
        workdir = Path(tempfile.mkdtemp(prefix="run-", dir=self._root))
        if uid is not None:
            os.chown(workdir, uid, uid)
        return workdir

    def _execute(self, workdir: Path, stdin: str, uid: Optional[int]) -> RunResult:
        cmd = self._limits(uid) + COMMANDS[self.backend](workdir, [self.python, "-I", "main.py"], uid)
        with tempfile.TemporaryFile(dir=self._root) as out, tempfile.TemporaryFile(dir=self._root) as err:
            start = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=workdir, stdin=subprocess.PIPE, stdout=out, stderr=err,
                                    start_new_session=True)
            finished, cpu_s = _feed_and_wait(proc, stdin, self.config.wall_s)
            wall_s = time.perf_counter() - start
            stdout, stderr = _head(out, self.config.output_bytes), _head(err, self.config.output_bytes)
        if not finished:
            return RunResult(stdout, stderr, None, "wall", wall_s)
        return RunResult(stdout, stderr, proc.returncode, _limit_hit(proc.returncode, stderr, cpu_s, self.config), wall_s)

    def _limits(self, uid: Optional[int]) -> list[str]:
        """prlimit's command line for one run. Without a user of its own, RLIMIT_NPROC counts every process of the
        user running megarl, so the program's share is added to what that user runs now."""
        cfg = self.config
        processes = cfg.processes if uid is not None else cfg.processes + processes_of(os.getuid())
        cpu = _cpu_limit(cfg)
        return ["prlimit", f"--cpu={cpu}:{cpu + 1}", f"--as={cfg.memory_mb << 20}", f"--nproc={processes}",
                f"--fsize={cfg.output_bytes}", f"--nofile={_MAX_OPEN_FILES}", "--core=0", "--"]


def _feed_and_wait(proc: subprocess.Popen, stdin: str, wall_s: float) -> tuple[bool, float]:
    """Write stdin and wait up to wall_s for the sandbox (killed past it): (whether it ended on its own, the CPU
    seconds it and every process it reaped used). The usage is wait4's: the exit status alone cannot tell a CPU limit
    (unshare reports a child's signal as its own failure)."""
    writer = threading.Thread(target=_write, args=(proc, stdin.encode()), daemon=True)
    writer.start()
    deadline = time.monotonic() + wall_s
    finished = True
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            _, status, usage = os.wait4(proc.pid, 0)
            finished = False
            break
        time.sleep(0.005)
    proc.returncode = os.waitstatus_to_exitcode(status)
    writer.join()
    return finished, usage.ru_utime + usage.ru_stime


def _write(proc: subprocess.Popen, data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except (BrokenPipeError, ValueError):
        pass


def _cpu_limit(config: SandboxConfig) -> int:
    return max(1, int(config.cpu_s))


def _head(file, limit: int) -> str:
    file.seek(0)
    return file.read(limit).decode(errors="replace")


def _limit_hit(exit_code: int, stderr: str, cpu_s: float, config: SandboxConfig) -> str:
    """Which limit ended a program that exited with `exit_code` (a signal as −N, or as 128 + N through bwrap) after
    `cpu_s` CPU seconds (as far as wait4 saw them: through bwrap, not at all)."""
    if exit_code == 0:
        return ""
    sig = -exit_code if exit_code < 0 else exit_code - 128 if exit_code > 128 else 0
    if sig == signal.SIGXCPU or cpu_s >= 0.95 * _cpu_limit(config):
        return "cpu"
    if sig == signal.SIGXFSZ or "File too large" in stderr:  # Python ignores SIGXFSZ and sees EFBIG
        return "output"
    if "MemoryError" in stderr:
        return "memory"
    return ""


def processes_of(uid: int) -> int:
    """How many processes `uid` runs now."""
    count = 0
    for entry in os.listdir("/proc"):
        try:
            count += entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid
        except OSError:
            continue
    return count
