"""tests/helpers.py's `run_command`: a command's exit is what ends the wait, and a hang fails with what it printed."""

import sys
import time

import pytest

from tests.helpers import run_command

LEAVES_A_CHILD = ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
                  "print('done')")


def test_a_child_left_holding_the_output_does_not_stall_the_wait():
    start = time.monotonic()
    proc = run_command([sys.executable, "-c", LEAVES_A_CHILD], timeout=20)
    assert (proc.returncode, proc.stdout) == (0, "done\n")
    assert time.monotonic() - start < 15


def test_a_hang_fails_with_the_output_so_far():
    with pytest.raises(AssertionError, match=r"(?s)ran past 2 s.*--- stdout\nwaiting"):
        run_command([sys.executable, "-c", "import time; print('waiting', flush=True); time.sleep(60)"], timeout=2)
