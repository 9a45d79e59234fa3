"""What `megarl train`, `megarl sft` and `megarl rm` share: `--recipe R.yaml key.sub=value ...`, `--dry-run`,
`--help-keys`, the output directory owned for the run (megarl/run_lock.py) with the resolved config written there
before anything runs, a stop (SIGINT or SIGTERM) that ends the run with one line, and exit codes (2: fix the recipe
or the data; 1: the run failed; 128 + the signal's number: stopped)."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import socket
import sys
from typing import Any, Callable, Sequence

from megarl.config import ConfigError, RecipeSchema, describe_keys, load_config, save_config
from megarl.data.dataset import DataError
from megarl.models.accelerators import transformer_engine_asked, transformer_engine_available
from megarl.run_lock import RunLock
from parallel.launcher import stop_runtime
from parallel.quiet import accelerators_notice, be_verbose
from parallel.rank_watch import RankWatch

# Where a run cannot write (a full or read-only disk, no permission): the cause is the environment, not a bug.
STORAGE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# A collective fails as soon as a peer rank dies, a moment before its watcher reports it (parallel/rank_watch.py).
LOST_RANK_WAIT_S = 1.0


class Stopped(BaseException):
    """The run was asked to stop: Ctrl-C (SIGINT), or SIGTERM (`kill`, SLURM's preemption or time limit, torchrun
    stopping its ranks). A BaseException, as KeyboardInterrupt is: under torchrun the signal lands in worker code, and
    the hosts that report a worker's failures as data (`except Exception`) must not turn a stop into a failure of that
    call."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}" + (" (Ctrl-C)" if signum == signal.SIGINT else ""))


class _StopSignals:
    """SIGINT and SIGTERM become `Stopped`, raised once in the main thread so that the workers are shut down on the
    way out. Once the run is ending (`ending()`), the same signals again (Ctrl-C pressed twice or reaching every
    process of the terminal's group, torchrun's SIGTERM after a failure) do not break its shutdown off."""

    def __init__(self):
        self.stopping, self.previous = False, {}

    def __enter__(self) -> _StopSignals:
        self.previous = {signum: signal.signal(signum, self._stop) for signum in STOP_SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _stop(self, signum, frame) -> None:
        if not self.stopping:
            self.stopping = True
            raise Stopped(signum)

    def ending(self) -> None:
        self.stopping = True
        for signum in STOP_SIGNALS:  # Ray's driver puts a SIGTERM handler of its own over ours
            signal.signal(signum, self._stop)


def run_recipe_command(argv: Sequence[str] | None, schema: RecipeSchema, description: str, *,
                       check: Callable[[Any], None], describe: Callable[[Any], str], run: Callable[[Any], None],
                       failures: tuple[type[Exception], ...], saved: Callable[[Any], str]) -> int:
    """`check(cfg)` raises ConfigError for what is missing on disk; `describe(cfg)` says where the run goes;
    `run(cfg)` runs it, raising one of `failures` when it fails; `saved(cfg)` says what a run ended early leaves and
    how to go on from it."""
    parser = argparse.ArgumentParser(prog=schema.command, description=description)
    parser.add_argument("--recipe", help="recipe YAML (defaults apply to every key it leaves out)")
    parser.add_argument("--dry-run", action="store_true", help="validate, write the resolved config, and stop")
    parser.add_argument("--help-keys", action="store_true", help="list every config key with its default")
    parser.add_argument("--verbose", action="store_true", help="keep every library warning and progress bar")
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value")
    args = parser.parse_intermixed_args(argv)
    if args.verbose:
        be_verbose()
    if args.help_keys:
        print(describe_keys(schema))
        return 0
    with _StopSignals() as signals:
        try:
            cfg, lock = _prepare(args, schema, check, describe)
        except Stopped as e:
            return _fail(f"{e} before the run started", 128 + e.signum)
        if cfg is None:
            return 2
        try:
            code = 0 if args.dry_run else _run(cfg, run, failures, lambda: saved(cfg), signals)
        finally:
            _released(lock)
        if code > 128:  # stopped by a signal: the workers are shut down and the outputs closed, but interpreter
            # teardown after a signal that Ray's C++ handler also saw ends in abort() (exit 134): leave now
            sys.stdout.flush()
            os._exit(code)
    return code


def _prepare(args, schema: RecipeSchema, check: Callable[[Any], None], describe: Callable[[Any], str]):
    """The config, checked, and the output directory owned (by the process that speaks for the run) with the
    config written there; (None, None) after printing why not."""
    cfg = lock = None
    notes: list[str] = []
    try:
        cfg = load_config(args.recipe, args.overrides, schema, notes)
        if notes and _speaks_for_run():
            print("\n".join(notes), file=sys.stderr)
        check(cfg)
        if not _speaks_for_run():  # torchrun's other ranks: rank 0 owns the directory and writes it
            return cfg, None
        lock = RunLock(cfg.trainer.output_dir)
        written = save_config(cfg, cfg.trainer.output_dir)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return None, _released(lock)
    except OSError as e:
        print(f"error: trainer.output_dir={cfg.trainer.output_dir} cannot be written ({e.strerror}: {e.filename}): "
              "point it at a writable directory with free space", file=sys.stderr)
        return None, _released(lock)
    notice = None if args.dry_run else accelerators_notice(transformer_engine_available(),
                                                           transformer_engine_asked(cfg))
    print("\n".join([f"resolved config written to {written}", describe(cfg), *([notice] if notice else [])]))
    return cfg, lock


def _released(lock: RunLock | None) -> None:
    if lock is not None:
        lock.release()


def _speaks_for_run() -> bool:
    """The Ray driver, or rank 0 under torchrun (whose every rank runs this)."""
    return os.environ.get("RANK", "0") == "0"


def _run(cfg, run: Callable[[Any], None], failures: tuple[type[Exception], ...], saved: Callable[[], str],
         signals: _StopSignals) -> int:
    """Run; the exit code, after one line saying why when the run ends early."""
    watch = RankWatch()
    try:
        run(cfg)
        code, line = 0, None
    except BaseException as e:
        signals.ending()
        code, line = _why(e, failures, watch, saved)
    watch.farewell()
    if line is not None:
        _fail(line, code)
    return code


def _why(error: BaseException, failures: tuple[type[Exception], ...], watch: RankWatch, saved: Callable[[], str]):
    """The exit code of a run that `error` ended and the line saying why (None: not on this process); `error` raised
    again when it is a bug, for its traceback. Under torchrun, a rank of this host that died is the cause of what rank
    0 then meets (a failed collective, or torchrun's SIGTERM). A stop gets one line for the run (torchrun signals
    every rank); a failure is reported by every rank it reaches."""
    if isinstance(error, SystemExit) and not error.code:  # a served pool's rank at the run's end (served_backend.py)
        return 0, None
    if isinstance(error, KeyboardInterrupt) or (isinstance(error, SystemExit) and error.code == signal.SIGTERM):
        error = Stopped(signal.SIGINT if isinstance(error, KeyboardInterrupt) else signal.SIGTERM)  # Ray's driver
    if isinstance(error, Stopped):
        cause = _lost_ranks_line(watch) or error
        return 128 + error.signum, f"{cause}; {saved()}" if _speaks_for_run() else None
    if isinstance(error, (ConfigError, DataError)):
        return 2, str(error)
    if isinstance(error, OSError) and error.errno in STORAGE_ERRORS:
        return 2, f"{error.filename}: {error.strerror}: free space or point trainer.output_dir elsewhere"
    if isinstance(error, Exception):
        lost = _lost_ranks_line(watch, wait_s=LOST_RANK_WAIT_S)
        if lost or isinstance(error, failures):
            return 1, f"{lost}; {saved()}" if lost else str(error)
    raise error


def _lost_ranks_line(watch: RankWatch, wait_s: float = 0.0) -> str:
    """Under torchrun on rank 0: the ranks of this host that died, reported within `wait_s` seconds."""
    lost = watch.lost_ranks(wait_s)
    if not lost:
        return ""
    ranks = ", ".join(map(str, lost))
    return (f"rank{'s' if len(lost) > 1 else ''} {ranks} on {socket.gethostname()} died (killed or crashed: "
            "torchrun's report below has its exit code) and torchrun stopped the other ranks")


def _fail(message, code: int = 1) -> int:
    """End the launcher's runtime first (Ray prints its workers' late output until then), so that the cause is
    the last line on screen."""
    stop_runtime()
    print(f"error: {message}", file=sys.stderr, flush=True)
    return code
