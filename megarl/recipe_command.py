"""What `megarl train`, `megarl sft` and `megarl rm` share: `--recipe R.yaml key.sub=value ...`, `--dry-run`,
`--help-keys`, the output directory owned for the run (megarl/run_lock.py) with the resolved config written there
before anything runs, and exit codes (2: fix the recipe or the data; 1: the run failed)."""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
from contextlib import contextmanager
from typing import Any, Callable, Sequence

from megarl.config import ConfigError, RecipeSchema, describe_keys, load_config, save_config
from megarl.data.dataset import DataError
from megarl.run_lock import RunLock
from parallel.controller import stop_runtime
from parallel.quiet import accelerators_notice, be_verbose

# Where a run cannot write (a full or read-only disk, no permission): the cause is the environment, not a bug.
STORAGE_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


class Stopped(BaseException):
    """The run was asked to stop: SIGTERM (`kill`, SLURM's preemption or time limit, torchrun stopping its ranks).
    A BaseException, as KeyboardInterrupt is: under torchrun the signal lands in worker code, and the hosts that
    report a worker's failures as data (`except Exception`) must not turn a stop into a failure of that call."""


@contextmanager
def _stop_on_sigterm():
    """SIGTERM becomes `Stopped`, raised in the driver's main thread, so the workers are shut down on the way out.
    Ray's driver turns SIGTERM into SystemExit(SIGTERM): that is a stop too."""
    def stop(signum, frame):
        raise Stopped(f"stopped by {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except SystemExit as e:
        if e.code != signal.SIGTERM:
            raise
        raise Stopped("stopped by SIGTERM") from e
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_recipe_command(argv: Sequence[str] | None, schema: RecipeSchema, description: str, *,
                       check: Callable[[Any], None], describe: Callable[[Any], str], run: Callable[[Any], None],
                       failures: tuple[type[Exception], ...]) -> int:
    """`check(cfg)` raises ConfigError for what is missing on disk; `describe(cfg)` says where the run goes;
    `run(cfg)` runs it, raising one of `failures` when it fails."""
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
    cfg, lock = _prepare(args, schema, check, describe)
    if cfg is None:
        return 2
    try:
        return 0 if args.dry_run else _run(cfg, run, failures, lock)
    finally:
        _released(lock)


def _prepare(args, schema: RecipeSchema, check: Callable[[Any], None], describe: Callable[[Any], str]):
    """The config, checked, and the output directory owned (by the process that speaks for the run) with the
    config written there; (None, None) after printing why not."""
    cfg = lock = None
    try:
        cfg = load_config(args.recipe, args.overrides, schema)
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
    notice = None if args.dry_run else accelerators_notice()
    print("\n".join([f"resolved config written to {written}", describe(cfg), *([notice] if notice else [])]))
    return cfg, lock


def _released(lock: RunLock | None) -> None:
    if lock is not None:
        lock.release()


def _speaks_for_run() -> bool:
    """The Ray driver, or rank 0 under torchrun (whose every rank runs this)."""
    return os.environ.get("RANK", "0") == "0"


def _run(cfg, run: Callable[[Any], None], failures: tuple[type[Exception], ...], lock: RunLock | None) -> int:
    try:
        with _stop_on_sigterm():
            run(cfg)
    except Stopped as e:
        if _speaks_for_run():  # torchrun signals every rank: one line for the run
            _fail(f"{e}; starting the same command again resumes from the last checkpoint (trainer.resume_mode=auto)")
        _released(lock)
        sys.stdout.flush()
        # The workers are shut down and the outputs closed; interpreter teardown after a signal that Ray's C++
        # handler also saw ends in abort() (exit 134), so leave now with the shell's code for SIGTERM.
        os._exit(128 + signal.SIGTERM)
    except (ConfigError, DataError) as e:
        return _fail(e, 2)
    except OSError as e:
        if e.errno not in STORAGE_ERRORS:
            raise
        return _fail(f"{e.filename}: {e.strerror}: free space or point trainer.output_dir elsewhere", 2)
    except failures as e:
        return _fail(e, 1)
    return 0


def _fail(message, code: int = 1) -> int:
    """End the launcher's runtime first (Ray prints its workers' late output until then), so that the cause is
    the last line on screen."""
    stop_runtime()
    print(f"error: {message}", file=sys.stderr, flush=True)
    return code
