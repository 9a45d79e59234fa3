"""A process that leads its own session (a torchrun rank) takes its helper processes with it however it ends, and
under torchrun rank 0 learns which rank of its host died without a word (parallel/rank_watch.py). Here this test
process plays torchrun's agent: the parent of both ranks, each in a session of its own. With torchrun itself, and
megatron's checkpoint writer as the helper: tests/megarl/trainer/test_faults_e2e.py."""

import json
import os
import signal
import subprocess
import sys

import psutil

from parallel.rank_watch import RankWatch
from tests.helpers import ENV, REPO_ROOT, left_running

RANK = """
import subprocess, sys, time
from parallel.rank_watch import RankWatch
watch = RankWatch()
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
print(helper.pid, flush=True)
command = sys.stdin.readline().strip()  # "lost": report the ranks lost; "bye": end on purpose
if command == "lost":
    print(watch.lost_ranks(wait_s=2), flush=True)
elif command == "bye":
    watch.farewell()
"""


def start_rank(rank: int) -> tuple[subprocess.Popen, psutil.Process]:
    env = {**ENV, "TORCHELASTIC_RUN_ID": "test", "RANK": str(rank)}
    proc = subprocess.Popen([sys.executable, "-c", RANK], cwd=REPO_ROOT, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    return proc, psutil.Process(int(proc.stdout.readline()))


def tell(proc: subprocess.Popen, command: str) -> str:
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


def test_a_sigkilled_ranks_helpers_end_with_it_and_rank_0_learns_which_rank_died():
    (rank_0, helper_0), (rank_1, helper_1) = start_rank(0), start_rank(1)
    rank_1.send_signal(signal.SIGKILL)
    rank_1.wait()
    assert left_running([helper_1]) == []
    assert json.loads(tell(rank_0, "lost")) == [1]
    rank_0.wait(timeout=30)
    assert left_running([helper_0]) == []  # a rank that ends normally leaves no helper either


def test_a_rank_that_ends_on_purpose_is_not_reported():
    (rank_0, _), (rank_1, helper_1) = start_rank(0), start_rank(1)
    tell(rank_1, "bye")
    rank_1.wait(timeout=30)
    assert left_running([helper_1]) == []
    assert json.loads(tell(rank_0, "lost")) == []


def test_a_process_sharing_its_shells_group_starts_no_watcher():
    """`megarl train ... | tee log`: the group is the shell's job, tee's too, and not the run's to end."""
    assert os.getsid(0) != os.getpid()  # pytest's process, as a command a shell started
    assert RankWatch().watcher is None
