"""A run owns its output directory (megarl/run_lock.py): a second holder is refused with the first one named, a
release frees the directory, and a lock a dead run left behind is taken over with a line naming that run. The same
with real processes, two runs started in one directory: tests/megarl/trainer/test_faults_e2e.py."""

import json
import os
import re
import socket

import pytest

from megarl.run_lock import LOCK_NAME, OutputDirInUse, RunLock


def test_a_second_holder_is_refused_naming_the_first_until_it_releases(tmp_path, capsys):
    first = RunLock(tmp_path / "run")
    with pytest.raises(OutputDirInUse) as refused:
        RunLock(tmp_path / "run")
    assert re.fullmatch(rf"trainer.output_dir={tmp_path / 'run'} is in use by another run \(host "
                        rf"{re.escape(socket.gethostname())}, pid {os.getpid()}, since \d{{4}}-\d\d-\d\dT[\d:]+"
                        r"[+-][\d:]+\): let it finish or stop it, or give this run a trainer.output_dir of its own",
                        str(refused.value))
    first.release()
    assert not (tmp_path / "run" / LOCK_NAME).exists()
    RunLock(tmp_path / "run").release()
    assert capsys.readouterr().out == ""  # a released directory is taken without a word


def test_a_lock_left_by_a_run_that_died_is_taken_over_naming_it(tmp_path, capsys):
    (tmp_path / LOCK_NAME).write_text(json.dumps({"host": "node7", "pid": 4242, "since": "2026-11-27T13:51:18+00:00"}))
    lock = RunLock(tmp_path)  # nobody holds the file's lock: its process is gone, whatever the file says
    assert capsys.readouterr().out == (f"note: taking trainer.output_dir={tmp_path} over from a run that ended without "
                                       "releasing it (host node7, pid 4242, since 2026-11-27T13:51:18+00:00)\n")
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    lock.release()
