"""Test-only start-up hook (tests/helpers.py puts this folder first on the PYTHONPATH of the processes tests start):
a process that would import torch and megatron-core (`python -m megarl.X` or `-m tests.X`, torchrun, a test's worker
script, and what such a process starts in turn: a Ray worker process of its local cluster, multiprocessing's spawned
children and forkserver, which import its main module again) asks tests/zygote/server.py, which imported them once,
to fork a copy that runs it, passes its descriptors (streams, multiprocessing's pipes) and signals on, and exits as
the copy exits. ~10 CPU-seconds of imports saved per process on CI's two cores. Without
the server (MEGARL_TEST_ZYGOTE unset or not listening), or with MEGARL_VERBOSE (import-time warnings wanted), the
process starts as usual."""

import os
import sys

FORKED_MODULES = ("megarl.", "torch.distributed.run", "benchmarks.", "tests.")
RAY_WORKER = os.path.join("ray", "_private", "workers", "default_worker.py")
MULTIPROCESSING = ("from multiprocessing.spawn import spawn_main", "from multiprocessing.forkserver import main")
MAX_FDS = 64  # descriptors handed over in one message; a process with more starts as usual


def _forkable(argv: list[str]) -> int | None:
    """Where the target starts in `argv` (python's own), or None for a process to start as usual."""
    i = 1
    while i < len(argv) and argv[i] in ("-u", "-B"):
        i += 1
    if i + 1 < len(argv) and argv[i] == "-m":
        return i if argv[i + 1].startswith(FORKED_MODULES) else None
    if i + 1 < len(argv) and argv[i] == "-c":
        return i if argv[i + 1].startswith(MULTIPROCESSING) else None
    if i < len(argv) and argv[i].endswith(".py"):
        path = os.path.abspath(argv[i])
        return i if "/tests/" in path or path.endswith(RAY_WORKER) else None
    return None


def _inherited_fds() -> list[int]:
    """The descriptors this process started with: 0, 1, 2 and those its parent passed on."""
    fds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(name))
        except OSError:  # listdir's own, closed by now
            continue
        fds.append(int(name))
    return sorted(fds)


def _run_in_zygote(path: str) -> None:
    import array
    import json
    import signal
    import socket

    start = _forkable(list(sys.orig_argv))
    inherited = _inherited_fds()
    if start is None or len(inherited) > MAX_FDS:
        return
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        return
    request = json.dumps({"flags": sys.orig_argv[1:start], "argv": sys.orig_argv[start:], "cwd": os.getcwd(),
                          "env": dict(os.environ), "fds": inherited}).encode()
    fds = array.array("i", inherited)
    conn.sendmsg([len(request).to_bytes(8, "big")], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    conn.sendall(request)

    def forward(signum, frame):
        conn.sendall(bytes([signum]))

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT):
        signal.signal(signum, forward)
    status = b""
    while chunk := conn.recv(64):
        status += chunk
    kind, _, number = status.decode().partition(" ")
    if kind == "signal":
        signal.signal(int(number), signal.SIG_DFL)
        os.kill(os.getpid(), int(number))
    os._exit(int(number) if kind == "exit" else 1)


if os.environ.get("MEGARL_TEST_ZYGOTE") and not os.environ.get("MEGARL_VERBOSE"):
    _run_in_zygote(os.environ["MEGARL_TEST_ZYGOTE"])
