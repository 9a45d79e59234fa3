"""Worker processes that run a user's reward function (`reward.function`) one sample at a time each, so that a sample
that hangs costs `reward.timeout_s` and one process, never the run; and that one that prints a lot costs a log file,
not the console: the first OUTPUT_CAP bytes a call prints (stdout and stderr, a native library's included) reach the
console, the call's whole output goes to the run's reward log, and the bytes kept off the console are counted
(`reward/output_overflow_bytes`).

Each worker loads the function itself from its spec (nothing unpicklable crosses), scores the samples the driver
sends it and answers with pickled Outcomes. A worker still on a sample at its deadline is killed and replaced, and
the sample scores 0 as timed out, so a batch of N samples on W workers takes at most about ceil(N / W) timeouts.
multiprocessing.Pool cannot do this: it can neither time out nor kill one task (only the whole pool), and its
result thread dies on a result the driver cannot unpickle.
"""

from __future__ import annotations

import atexit
import fcntl
import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Optional, Sequence

from megarl.registry import UnknownNameError
from megarl.rewards.function import load_reward_function
from megarl.rewards.outcome import Outcome, RewardFunctionError, call_reward, failure

# Not fork: the driver may be a Ray driver with threads, and a forked child can inherit a lock one of them held.
# The fork server starts once as a fresh interpreter, imports torch, this module and the driver's main module once,
# and forks each worker from that (a replacement after a timeout too) in a fraction of the seconds a spawned
# interpreter needs to import them.
_CONTEXT = multiprocessing.get_context("forkserver")
# A worker's start: the fork, multiprocessing re-importing the driver's main module, and loading the function
# (math-verify imports sympy), on a driver node that may be busy. Not reward.timeout_s: that bounds one sample.
START_TIMEOUT_S = 120.0
OUTPUT_CAP = 1024  # bytes of a call's output that reach the console
OUTPUT_LOG_LIMIT = 1 << 30  # the reward log's size past which a call's output is counted but not kept


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    deadline: float  # when it must be loaded (while starting) or done with its sample (while busy)
    ready: bool = False
    task: Optional[int] = None  # the index of the sample it is scoring

    @property
    def idle(self) -> bool:
        return self.ready and self.task is None


class RewardPool:
    """`workers` processes running the function `spec` names with `kwargs`; a sample may run `timeout_s` seconds;
    what a call prints past OUTPUT_CAP bytes goes to `output_log` (None: it is dropped, and counted all the same).

    Workers start at the first `map` and live until `close` (the scorer's context, or at exit)."""

    def __init__(self, spec: str, kwargs: dict | None, timeout_s: float, workers: int, output_log: str | None = None):
        self.spec, self.kwargs, self.timeout_s, self.size = spec, dict(kwargs or {}), timeout_s, workers
        self.output_log = output_log
        self._workers: list[_Worker] = []

    def __enter__(self) -> RewardPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def map(self, samples: Sequence[dict]) -> list[Outcome]:
        """Each sample's Outcome (timed_out past the timeout). An unknown data_source raises UnknownNameError at
        once; a worker that cannot load the function raises RewardFunctionError."""
        outcomes: list[Optional[Outcome]] = [None] * len(samples)
        pending = deque(range(len(samples)))
        self._start_missing()
        try:
            while pending or any(w.task is not None for w in self._workers):
                for worker in self._workers:
                    if worker.idle and pending:
                        self._send(worker, pending.popleft(), samples)
                self._wait()
                for i, worker in enumerate(self._workers):
                    if not worker.idle and not self._check(worker, outcomes):
                        self._kill(worker)
                        self._workers[i] = self._start()
        except BaseException:
            # The busy workers' answers would land in the next batch; the run may not even have one.
            for i, worker in enumerate(self._workers):
                if worker.task is not None:
                    self._kill(worker)
                    self._workers[i] = self._start()
            raise
        return outcomes

    def close(self) -> None:
        """Kill every worker: they hold no state, and a hung one would never stop on request."""
        for worker in self._workers:
            self._kill(worker)
        self._workers = []
        atexit.unregister(self.close)

    def _start_missing(self) -> None:
        if not self._workers:
            atexit.register(self.close)  # a driver that dies without closing must not leave hung workers behind
            _CONTEXT.set_forkserver_preload([__name__, *_main_module()])
        self._workers += [self._start() for _ in range(self.size - len(self._workers))]

    def _start(self) -> _Worker:
        parent, child = _CONTEXT.Pipe()
        process = _CONTEXT.Process(target=_serve, args=(self.spec, self.kwargs, child, self.output_log),
                                   name="megarl-reward-worker")
        process.start()
        child.close()  # the worker now holds the only other end: its exit reads as EOF here
        return _Worker(process, parent, deadline=time.monotonic() + START_TIMEOUT_S)

    def _send(self, worker: _Worker, index: int, samples: Sequence[dict]) -> None:
        worker.task, worker.deadline = index, time.monotonic() + self.timeout_s
        try:
            worker.conn.send(samples[index])
        except OSError:
            pass  # it died: _check finds its exit and fails the sample

    def _wait(self) -> None:
        """Until a worker answers or exits, or the nearest deadline."""
        waiting = [w for w in self._workers if not w.idle]
        timeout = max(0.0, min(w.deadline for w in waiting) - time.monotonic())
        wait([o for w in waiting for o in (w.conn, w.process.sentinel)], timeout)

    def _check(self, worker: _Worker, outcomes: list) -> bool:
        """Take the worker's answer, if any, into `outcomes`; False when it must be replaced (it exited, or ran
        past its deadline), its sample then failed or timed out."""
        message = None
        if worker.conn.poll():
            try:
                message = worker.conn.recv()
            except (EOFError, OSError):
                pass  # it exited: is_alive says so below
        if message is not None:
            return self._take(worker, message, outcomes)
        exited = not worker.process.is_alive()
        if not exited and time.monotonic() < worker.deadline:
            return True
        if not worker.ready:  # the function itself cannot be run: every sample would fail the same way
            what = (f"exited with exit code {worker.process.exitcode}" if exited else
                    f"did not finish loading within {START_TIMEOUT_S:.0f} s (does importing it hang?)")
            raise RewardFunctionError(f"a reward worker for reward.function={self.spec!r} {what}; its log above "
                                      "says why")
        outcomes[worker.task] = Outcome(timed_out=True) if not exited else failure(RuntimeError(
            f"the reward worker process exited with exit code {worker.process.exitcode} while scoring this sample"))
        worker.task = None
        return False

    def _take(self, worker: _Worker, message: tuple, outcomes: list) -> bool:
        kind, payload = message
        if kind == "ready":
            worker.ready, worker.deadline = True, float("inf")
        elif kind == "done":
            outcomes[worker.task], worker.task = _loads(payload), None
        elif kind == "unknown":
            raise UnknownNameError(payload)
        else:
            raise RewardFunctionError(f"a reward worker cannot load reward.function={self.spec!r}: {payload}")
        return True

    def _kill(self, worker: _Worker) -> None:
        worker.process.kill()
        worker.process.join(timeout=10)
        worker.conn.close()


def _main_module() -> list[str]:
    """The driver's main module, when run as `python -m NAME`: each worker re-runs it (multiprocessing's rule), and
    with its imports done once in the fork server that costs nothing. Packages' __main__ modules run unguarded."""
    name = getattr(getattr(sys.modules["__main__"], "__spec__", None), "name", None)
    return [name] if name and not name.endswith("__main__") else []


def _serve(spec: str, kwargs: dict, conn: Connection, output_log: str | None) -> None:
    """A worker: load the function, then score each sample the driver sends until the driver is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle, and it kills us
    try:
        fn = load_reward_function(spec)
    except Exception as exc:
        conn.send(("load_failed", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    output = _CappedOutput(output_log)
    while True:
        try:
            sample = conn.recv()
        except EOFError:
            return
        try:
            with output:
                outcome = call_reward(fn, sample, kwargs)
        except UnknownNameError as e:
            conn.send(("unknown", str(e)))
            continue
        outcome.output_overflow = output.overflow
        conn.send(("done", _dumps(outcome)))


class _CappedOutput:
    """Around a call: this process's stdout and stderr (file descriptors 1 and 2) go to a scratch file; afterwards
    its first OUTPUT_CAP bytes go on to the console, and a longer output goes whole to the reward log, under a line
    naming the worker; `overflow` is the bytes kept off the console."""

    def __init__(self, log: str | None):
        self.log, self.overflow = log, 0
        self.scratch = tempfile.TemporaryFile()
        self.console = (os.dup(1), os.dup(2))

    def __enter__(self) -> None:
        self.scratch.truncate(0)
        self.scratch.seek(0)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        for fd in (1, 2):
            os.dup2(self.scratch.fileno(), fd)

    def __exit__(self, *exc) -> None:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        for fd, console in zip((1, 2), self.console):
            os.dup2(console, fd)
        size = os.fstat(self.scratch.fileno()).st_size
        self.scratch.seek(0)
        head = self.scratch.read(OUTPUT_CAP)
        self.overflow = size - len(head)
        if self.overflow:
            where = f"in {self.log}" if self._keep(size) else "not kept (no reward log, or it is full)"
            head += f"\n[... {self.overflow} more bytes of this reward function call's output {where}]\n".encode()
        _write_all(1, head)

    def _keep(self, size: int) -> bool:
        """Append the whole output to the reward log; whether it was."""
        if self.log is None:
            return False
        with open(self.log, "ab") as log:
            fcntl.flock(log, fcntl.LOCK_EX)  # one call's output at a time, from any worker
            if log.seek(0, os.SEEK_END) + size > OUTPUT_LOG_LIMIT:
                return False
            log.write(f"=== reward worker pid {os.getpid()}: {size} bytes ===\n".encode())
            self.scratch.seek(0)
            while chunk := self.scratch.read(1 << 20):
                log.write(chunk)
        return True


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _dumps(outcome: Outcome) -> bytes:
    """Pickled here, so that extra keys that cannot be pickled fail their sample, not the worker."""
    try:
        return pickle.dumps(outcome)
    except Exception as exc:
        return pickle.dumps(failure(RuntimeError(f"its result cannot be sent to the driver: {exc!r}")))


def _loads(payload: bytes) -> Outcome:
    """Unpickled here, so that a result the driver cannot load (e.g. an instance of a class of the user's module,
    which the driver never imported) fails its sample, not the batch."""
    try:
        return pickle.loads(payload)
    except Exception as exc:
        return failure(RuntimeError(f"its result cannot be loaded in the driver (return plain values): {exc!r}"))
