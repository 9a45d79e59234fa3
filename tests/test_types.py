"""The type checker passes on the trainer, the workers and the controller (mypy.ini names them): the RL loop is typed
against the role interfaces, and every call on a role's handle against the worker method it names."""

import subprocess
import sys

from tests.helpers import REPO_ROOT


def test_mypy_passes(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
