"""A rank's helper processes end with it, and rank 0 learns which rank died.

torchrun starts every rank in a session (and process group) of its own, and the processes a rank starts join that
group: megatron's checkpoint writer (a multiprocessing Manager) with multiprocessing's resource tracker, SGLang's
schedulers, a reward pool's fork server. When a rank dies, torchrun signals the groups of the ranks still alive, not
the dead one's, whose helpers would live on under PID 1 holding the job's stdout (`torchrun ... | tee log` would not
end). So a process that leads a session of its own starts a watcher: a small interpreter that waits for it to exit,
however it exits (SIGKILL included), then kills what is left of its process group. A process that does not lead its
session shares its group with its shell's job (`megarl train ... | tee log`), which is not its to end.

A process that ends on purpose (a stop, a failure it reports, the end of the run) tells its watcher first. The
watcher of a torchrun rank that died without a word sends the rank's number to rank 0 of its host (a datagram to an
abstract Unix socket named after torchrun's agent, their parent), so that rank 0's last line names the rank that died
rather than the SIGTERM torchrun then sent it. A rank that dies on another node is named by that node's torchrun.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys

# The watcher: `python -I -S -c WATCHER pid rank address`. It waits for the process's exit on a pidfd (polling its own
# parent where pidfds are missing), then reads the goodbye the process may have left on its stdin.
WATCHER = r"""
import os, select, signal, socket, sys, time
pid, rank, address = int(sys.argv[1]), sys.argv[2], sys.argv[3]
for stop in (signal.SIGINT, signal.SIGTERM):  # sent to the whole group (Ctrl-C, torchrun): outlive the process
    signal.signal(stop, signal.SIG_IGN)
try:
    exits = [os.pidfd_open(pid)]
except (AttributeError, OSError):
    exits = []
while os.getppid() == pid:  # not reparented yet: the process lives
    if exits:
        select.select(exits, [], [])
    else:
        time.sleep(0.2)
os.set_blocking(0, False)
try:
    farewell = os.read(0, 64).startswith(b"bye")
except OSError:
    farewell = False
if not farewell and address:
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(rank.encode(), "\0" + address)
    except OSError:
        pass
os.killpg(pid, signal.SIGKILL)
"""


class RankWatch:
    """This process's watcher (none where it does not lead its session), and under torchrun on rank 0 the inbox of
    its host's ranks that died."""

    def __init__(self):
        self.watcher: subprocess.Popen | None = None
        self.inbox: socket.socket | None = None
        if os.getsid(0) != os.getpid():
            return
        address = f"megarl-ranks-{os.getppid()}" if "TORCHELASTIC_RUN_ID" in os.environ else ""  # abstract
        if address and os.environ.get("RANK") == "0":
            self.inbox = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.inbox.bind("\0" + address)
            self.inbox.setblocking(False)
        self.watcher = subprocess.Popen([sys.executable, "-I", "-S", "-c", WATCHER, str(os.getpid()),
                                         os.environ.get("RANK", "0"), address],
                                        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def lost_ranks(self, wait_s: float = 0.0) -> list[int]:
        """The ranks of this host that died without a word, reported within `wait_s` seconds (rank 0 under torchrun;
        [] elsewhere, at once)."""
        lost = set()
        if self.inbox is not None and wait_s:
            select.select([self.inbox], [], [], wait_s)
        while self.inbox is not None:
            try:
                lost.add(int(self.inbox.recv(64)))
            except (BlockingIOError, ValueError):
                break
        return sorted(lost)

    def farewell(self) -> None:
        """This process is about to end on purpose: its watcher reports no death when it goes."""
        if self.watcher is not None and self.watcher.stdin is not None:
            try:
                self.watcher.stdin.write(b"bye")
                self.watcher.stdin.flush()
            except OSError:
                pass
