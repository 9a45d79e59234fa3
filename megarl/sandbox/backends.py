"""How a program is walled off: the command line that starts it inside bubblewrap, or inside a fresh user namespace
where bubblewrap is missing, and a probe that says whether either works on this host.

bubblewrap (`bwrap`, Debian's `bubblewrap`) gives the program new user, PID, network, IPC and UTS namespaces, a
filesystem of the system's directories and Python's installation read-only, a private /tmp and its own working
directory as the only place it can write; nothing else of the host (the run's outputs, checkpoints, home) exists for
it. The fallback, `unshare` (util-linux), gives the same namespaces but the host's filesystem as it is: the program
can read what its user can read. Both die with the process that started them.

Started by root, the program runs as a user of its own (`uid`, through util-linux's `setpriv`), without a user
namespace: the kernel exempts root's processes from RLIMIT_NPROC, so only a user of its own bounds a fork bomb, and
files the host keeps from other users stay closed to it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

BACKENDS = ("bwrap", "unshare")
WORKDIR = "/sandbox"  # the program's working directory, inside bubblewrap
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives")


class SandboxUnavailable(RuntimeError):
    """Neither backend can start a program on this host."""


@functools.lru_cache(maxsize=None)
def interpreter_prefixes(python: str) -> tuple[str, ...]:
    """Where `python` is installed (base, virtualenv and exec prefixes)."""
    try:
        proc = subprocess.run([python, "-I", "-c", "import sys; print(sys.base_prefix, sys.prefix, sys.exec_prefix)"],
                              capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise SandboxUnavailable(f"sandbox.python={python!r} does not run: {exc}") from None
    if proc.returncode != 0:
        raise SandboxUnavailable(f"sandbox.python={python!r} does not run: {proc.stderr.strip()[-300:]}")
    return tuple(sorted({os.path.realpath(p) for p in proc.stdout.split()}))


def interpreter_roots(python: str) -> list[str]:
    """The directories `python` needs bound into the sandbox: its prefixes outside the system directories."""
    system = tuple(d + "/" for d in _SYSTEM_DIRS)
    return [r for r in interpreter_prefixes(python) if r not in _SYSTEM_DIRS and not r.startswith(system)]


def as_user(argv: Sequence[str], uid: int | None) -> list[str]:
    """`argv` run as `uid` (its group the same number, no other groups, no capabilities), or as it is."""
    if uid is None:
        return list(argv)
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--no-new-privs", "--", *argv]


def bwrap_command(workdir: Path, argv: Sequence[str], uid: int | None) -> list[str]:
    """`argv` inside bubblewrap, `workdir` its writable working directory at /sandbox."""
    namespaces = (["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
                  if uid is not None else ["--unshare-all", "--cap-drop", "ALL"])
    cmd = ["bwrap", *namespaces, "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev",
           "--tmpfs", "/tmp"]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            cmd += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            cmd += ["--ro-bind", path, path]
    for root in interpreter_roots(argv[0]):  # reachable by the program's user whatever the host's modes above it
        parents = Path(root).parents
        cmd += [arg for parent in reversed(parents[:-1]) for arg in ("--perms", "0755", "--dir", str(parent))]
        cmd += ["--ro-bind", root, root]
    for path in _SYSTEM_FILES:
        if os.path.exists(path):
            cmd += ["--ro-bind", path, path]
    cmd += ["--bind", str(workdir), WORKDIR, "--chdir", WORKDIR, "--clearenv",
            "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", WORKDIR,
            "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--setenv", "LANG", "C.UTF-8", "--"]
    return cmd + as_user(argv, uid)


def unshare_command(workdir: Path, argv: Sequence[str], uid: int | None) -> list[str]:
    """`argv` in fresh PID, network, IPC and UTS namespaces (and a user namespace unless it runs as `uid`)."""
    user = [] if uid is not None else ["--user", "--map-root-user"]
    return ["unshare", *user, "--pid", "--fork", "--kill-child", "--net", "--ipc", "--uts", "--mount", "--mount-proc",
            "--", "env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", f"HOME={workdir}", "PYTHONDONTWRITEBYTECODE=1",
            "LANG=C.UTF-8", *as_user(argv, uid)]


COMMANDS = {"bwrap": bwrap_command, "unshare": unshare_command}


def working_backend(choice: str, probe_dir: Path, uid: int | None, python: str = sys.executable) -> str:
    """The backend `choice` names ("auto": bwrap, else unshare) once it has run `python` here; otherwise
    SandboxUnavailable saying what to install or allow."""
    if choice not in ("auto", *BACKENDS):
        raise ValueError(f"sandbox.backend={choice!r}: choose auto, bwrap or unshare")
    reasons = []
    for backend in BACKENDS if choice == "auto" else (choice,):
        reason = _probe(backend, probe_dir, uid, python)
        if reason is None:
            return backend
        reasons.append(f"{backend}: {reason}")
    raise SandboxUnavailable(
        "no sandbox can run programs on this host (" + "; ".join(reasons) + "). Install bubblewrap "
        "(apt-get install bubblewrap) or allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1"
        " and user.max_user_namespaces > 0); megarl runs no model-written program without one")


def _probe(backend: str, probe_dir: Path, uid: int | None, python: str) -> str | None:
    """None if `backend` runs `python` here, else why not."""
    for tool in (backend, "setpriv") if uid is not None else (backend,):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    prefixes = interpreter_prefixes(python)
    try:
        proc = subprocess.run(COMMANDS[backend](probe_dir, [python, "-I", "-c", "import sys; print(sys.prefix)"], uid),
                              capture_output=True, text=True, timeout=60, cwd=probe_dir)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if proc.returncode != 0:
        return (proc.stderr.strip() or f"exit status {proc.returncode}").splitlines()[-1]
    if os.path.realpath(proc.stdout.strip()) not in prefixes:  # it fell back to another installation's library
        return (f"{python} cannot read its installation ({', '.join(prefixes)}) as the sandbox's user: set sandbox.python "
                "to an interpreter every user can read (e.g. /usr/bin/python3)")
    return None
