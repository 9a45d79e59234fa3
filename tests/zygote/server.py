"""Test-only fork server (see sitecustomize.py beside it): imports the heavy libraries every megarl process imports,
once, and forks a copy per request that becomes the asking process: its standard streams, working directory,
environment, sys.path and arguments; signals the asker receives reach the copy, the copy dies if the asker does, and
the asker gets the copy's exit status. megarl's own modules are not imported here: several read the environment when
imported, which each process sets for itself.

    python tests/zygote/server.py SOCKET_PATH
"""

import array
import atexit
import builtins
import fcntl
import importlib
import io
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import threading
import traceback
import types
import warnings

# Not Ray (0.4 s on top of these): its native core reads its settings from the environment once, at import, and a Ray
# worker process (which forks from here too) must read its own, its job's number among them.
PRELOAD = ("torch", "torch.distributed.elastic.agent.server.api", "megatron.core", "transformers", "mbridge",
           "datasets", "omegaconf", "safetensors", "pandas", "pyarrow")
RAY_WORKER = os.path.join("ray", "_private", "workers", "default_worker.py")  # as sitecustomize.py hands it over
MAX_FDS = 64  # as sitecustomize.py sends them
# megarl's own defaults (parallel/quiet.py), read by huggingface_hub and datasets when imported
IMPORT_TIME_ENV = {"HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}


def preload() -> None:
    os.environ.update(IMPORT_TIME_ENV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in PRELOAD:
            importlib.import_module(name)


def receive(conn: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    data, ancillary, _, _ = conn.recvmsg(8, socket.CMSG_SPACE(MAX_FDS * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    size, body = int.from_bytes(data, "big"), b""
    while len(body) < size:
        body += conn.recv(size - len(body))
    return json.loads(body), list(fds)


def child_path(request: dict, base: list[str]) -> list[str]:
    argv, cwd = request["argv"], request["cwd"]
    first = {"-m": cwd, "-c": ""}.get(argv[0]) or os.path.dirname(os.path.abspath(os.path.join(cwd, argv[0])))
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    return [first, *extra, *base]


def stream(fd: int, unbuffered: bool, mode: str):
    if mode == "r":
        return io.TextIOWrapper(io.BufferedReader(io.FileIO(fd, "r", closefd=False)))
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw), write_through=unbuffered,
                            line_buffering=not unbuffered and os.isatty(fd), errors="backslashreplace")


def watch(conn: socket.socket) -> None:
    """The asker's signals, byte by byte; its end (it died) kills this copy."""
    while data := conn.recv(16):
        for signum in data:
            os.kill(os.getpid(), signum)
    os.kill(os.getpid(), signal.SIGKILL)


def run(request: dict) -> int:
    argv = request["argv"]
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            main = types.ModuleType("__main__")
            main.__builtins__ = builtins
            sys.modules["__main__"] = main
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)
        else:
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
        return 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        print(stop.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1


def follow_rays_thread_count() -> None:
    """A fresh Ray worker's torch is imported with the actor's class, after Ray set OMP_NUM_THREADS to the actor's
    CPUs (where unset); this copy's torch was imported before, so it takes the number when Ray sets it."""
    import torch
    from ray._private import utils

    set_if_unset = utils.set_omp_num_threads_if_unset

    def set_and_follow() -> bool:
        changed = set_if_unset()
        if changed:
            torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        return changed

    utils.set_omp_num_threads_if_unset = set_and_follow


def take_descriptors(conn: socket.socket, targets: list[int], fds: list[int]) -> socket.socket:
    """The asker's descriptors at their numbers (multiprocessing tells a child its pipes' numbers on its command
    line), this copy's socket and the received ones moved out of their way first; returns the moved socket."""
    if len(fds) != len(targets):
        os._exit(70)
    floor = max(targets, default=2) + 1
    moved = socket.socket(fileno=fcntl.fcntl(conn.fileno(), fcntl.F_DUPFD_CLOEXEC, floor))
    conn.close()
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in fds]
    for fd in fds:
        os.close(fd)
    for target, fd in zip(targets, high):
        os.dup2(fd, target)
        os.close(fd)
    return moved


def become(conn: socket.socket, request: dict, fds: list[int], base: list[str]) -> None:
    """In the forked copy: take the asker's place, run its target, exit as Python would."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # A process group of its own, as the asker has where its starter gave it one (Ray's raylet to a worker process,
    # torchrun to a rank, run_command): the server's group holds every copy, and a Ray raylet that did not start from
    # here (`ray start` under SLURM) kills the group of a worker process that exits, which would be the server's.
    os.setpgid(0, 0)
    conn = take_descriptors(conn, request.get("fds", [0, 1, 2]), fds)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit():  # a fresh process's torch reads it at import (torchrun sets 1): float sums in its order
        import torch

        torch.set_num_threads(int(threads))
    if request["argv"][0].endswith(RAY_WORKER):
        follow_rays_thread_count()
    sys.path[:] = child_path(request, base)
    unbuffered = "-u" in request["flags"] or bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.dont_write_bytecode = "-B" in request["flags"] or bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    sys.stdin, sys.stdout, sys.stderr = stream(0, False, "r"), stream(1, unbuffered, "w"), stream(2, True, "w")
    threading.Thread(target=watch, args=(conn,), daemon=True).start()
    code = run(request)
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for out in (sys.stdout, sys.stderr):
        try:
            out.flush()
        except (OSError, ValueError):
            pass
    os._exit(code if isinstance(code, int) and 0 <= code < 256 else 1)


def serve(path: str) -> None:
    base = [p for p in sys.path[1:] if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    selector.register(sys.stdin, selectors.EVENT_READ)  # pytest holds its other end: at EOF, pytest has gone
    askers: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.fileobj is sys.stdin:
                if not os.read(sys.stdin.fileno(), 4096):
                    os._exit(0)
            elif key.fileobj is listener:
                conn, _ = listener.accept()
                request, fds = receive(conn)
                pid = os.fork()
                if pid == 0:
                    for other in askers.values():  # else an asker would wait for this copy to close its socket
                        other.close()
                    selector.close()
                    listener.close()
                    sys.stdin.close()
                    os.close(wake_read)
                    os.close(wake_write)
                    try:
                        become(conn, request, fds, base)
                    finally:
                        os._exit(70)
                for fd in fds:
                    os.close(fd)
                askers[pid] = conn
                selector.register(conn, selectors.EVENT_READ, pid)
            elif key.data is not None:
                forward(key.fileobj, key.data, selector)
            else:
                os.read(wake_read, 4096)
                reap(askers, selector)


def forward(conn: socket.socket, pid: int, selector: selectors.BaseSelector) -> None:
    """An asker's signals reach its copy from here as well, and its end ends the copy: the copy's own `watch` thread
    needs the GIL, which native code may hold for good (a Ray driver stuck connecting to its cluster did)."""
    try:
        data = conn.recv(16, socket.MSG_DONTWAIT)
    except BlockingIOError:  # the copy's `watch` thread took the bytes first
        return
    except OSError:
        data = b""
    if not data:
        selector.unregister(conn)
    for signum in data or [signal.SIGKILL]:
        try:
            os.kill(pid, signum)  # an unreaped copy: its pid is not yet anyone else's
        except ProcessLookupError:
            pass


def reap(askers: dict, selector: selectors.BaseSelector) -> None:
    while askers:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = askers.pop(pid, None)
        if conn is None:
            continue
        if conn in (key.fileobj for key in selector.get_map().values()):
            selector.unregister(conn)
        message = f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
        try:
            conn.sendall(message.encode())
        except OSError:
            pass
        conn.close()


if __name__ == "__main__":
    preload()
    serve(sys.argv[1])
