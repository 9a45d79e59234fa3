"""A run owns its output directory: `{trainer.output_dir}/run.lock` is held for the run's life, so that a second run
given the same directory stops at once with one line naming the first, instead of interleaving its metrics, sample
logs, config and checkpoint files with it.

The lock is the kernel's (flock(2)), so it ends with its process however that process ends (a SIGKILL or the OOM
killer; on NFS a dead host's locks end with its lease). A lock file left by a run that died is then only text: the
next run takes the directory over and says whose it was. The file names its holder (host, pid, since when) for the
refusal. One process holds it: the Ray driver, or rank 0 under torchrun (the only process that writes there before
the workers start). On a filesystem without flock the run goes on unlocked, saying so.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import socket
import sys
from pathlib import Path

from megarl.config import ConfigError

LOCK_NAME = "run.lock"


class OutputDirInUse(ConfigError):
    """Another run holds the output directory."""


class RunLock:
    """Held from construction until `release()` (or the process's end)."""

    def __init__(self, output_dir: str | Path):
        self.directory = Path(output_dir).expanduser()
        self.path = self.directory / LOCK_NAME
        self.directory.mkdir(parents=True, exist_ok=True)
        self.fd = self._acquire()

    def release(self) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)  # while still held: a run waiting on this file retries on a new one
            os.close(self.fd)
            self.fd = None

    def _acquire(self) -> int | None:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd) or "it is starting"
                os.close(fd)
                raise OutputDirInUse(f"trainer.output_dir={self.directory} is in use by another run ({holder}): let "
                                     "it finish or stop it, or give this run a trainer.output_dir of its own") from None
            except OSError as e:
                os.close(fd)
                print(f"note: trainer.output_dir={self.directory} cannot be locked ({e.strerror}): nothing stops "
                      "another run from using it at the same time", flush=True)
                return None
            if _is_current(fd, self.path):
                break
            os.close(fd)  # its holder released it between our open and our lock: lock the file there now
        previous = _holder(fd)
        if previous:
            print(f"note: taking trainer.output_dir={self.directory} over from a run that ended without releasing it "
                  f"({previous})", flush=True)
        mine = {"host": socket.gethostname(), "pid": os.getpid(),
                "since": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "command": sys.argv}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(mine).encode(), 0)
        return fd


def _holder(fd: int) -> str:
    """Who the lock file names, for people ('' for an empty file)."""
    text = os.pread(fd, 1 << 16, 0).decode(errors="replace")
    if not text.strip():
        return ""
    try:
        holder = json.loads(text)
        return f"host {holder['host']}, pid {holder['pid']}, since {holder['since']}"
    except (ValueError, KeyError, TypeError):
        return f"its lock file {LOCK_NAME} reads {text[:200]!r}"


def _is_current(fd: int, path: Path) -> bool:
    """Whether `fd` is still the file at `path` (a releasing holder unlinks it)."""
    try:
        here, mine = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)
