"""A command's process ends with its exit code and its output, its heap frozen for teardown's collector."""

import subprocess
import sys

ENDS = """
import atexit, gc, sys
from megarl.process_exit import exit_process
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0))
print("last line", end="")
exit_process(int(sys.argv[1]))
"""


def test_exit_keeps_the_code_and_output_and_skips_the_heap():
    for code in (0, 3):
        proc = subprocess.run([sys.executable, "-c", ENDS, str(code)], capture_output=True, text=True, timeout=60)
        assert proc.returncode == code, proc.stderr
        assert proc.stdout == "last linefrozen at exit: True\n"


def test_the_console_script_ends_through_it():
    entry = subprocess.run([sys.executable, "-c", "from importlib.metadata import entry_points; "
                            "print(entry_points(group='console_scripts')['megarl'].value)"],
                           capture_output=True, text=True, timeout=60)
    assert entry.stdout.strip() == "megarl.cli:console"
