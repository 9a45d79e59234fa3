"""The sandbox runs real programs under bubblewrap (CI installs it) or, as the fallback, fresh namespaces: each limit
stops what it names, and each way out a model-written program might try is refused or contained."""

import os
import shutil
import socket
import sys
import time
from dataclasses import replace

import pytest

from megarl.config.schema import SandboxConfig
from megarl.sandbox import Program, Sandbox, SandboxUnavailable
from megarl.sandbox.backends import working_backend
from megarl.sandbox.runner import processes_of

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="needs bubblewrap (apt-get install bubblewrap; .ci/run installs it)")
LIMITS = SandboxConfig(wall_s=5.0, cpu_s=2.0, memory_mb=256, processes=8, output_bytes=4096, workers=4)


@pytest.fixture(scope="module", params=["bwrap", "unshare"])
def sandbox(request):
    """Both backends. Without bubblewrap's private filesystem, root's sandbox user cannot read an interpreter under
    /root: the fallback then runs the system's (docs/agents.md)."""
    python = sys.executable if request.param == "bwrap" or os.geteuid() != 0 else "/usr/bin/python3"
    if not os.path.exists(python):
        pytest.skip(f"the unshare fallback as root needs an interpreter every user can read; {python} is missing")
    with Sandbox(replace(LIMITS, backend=request.param, python=python)) as box:
        yield box


def run(box, code, stdin=""):
    return box.run(Program(code, stdin))


def test_a_program_reads_stdin_and_prints(sandbox):
    result = run(sandbox, "print(sum(map(int, input().split())))", "3 4\n")
    assert (result.exit_code, result.stdout, result.limit) == (0, "7\n", "")


def test_auto_picks_bubblewrap_and_an_unknown_backend_is_refused(tmp_path):
    with Sandbox(LIMITS) as box:
        assert box.backend == "bwrap"
    with pytest.raises(ValueError, match="sandbox.backend='docker': choose auto, bwrap or unshare"):
        working_backend("docker", tmp_path, None)


def test_without_any_backend_the_refusal_says_what_to_install(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match=r"bwrap: bwrap is not installed.*apt-get install bubblewrap"):
        Sandbox(LIMITS)


def test_a_program_past_the_wall_time_is_killed_with_what_it_started(sandbox):
    marker = f"{1000 + os.getpid() % 1000}.25"
    result = run(sandbox, f"import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'])\ntime.sleep(60)")
    assert result.exit_code is None and result.limit == "wall" and result.timed_out
    assert 4.5 < result.wall_s < 8
    time.sleep(0.5)
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).endswith(f"sleep\0{marker}\0")]


def test_a_busy_loop_stops_at_the_cpu_limit_before_the_wall_time(sandbox):
    result = run(sandbox, "while True: pass")
    assert result.limit == "cpu" and result.timed_out and result.wall_s < 4.5


def test_a_memory_bomb_fails_at_the_memory_limit(sandbox):
    result = run(sandbox, "x = bytearray(2 << 30)")
    assert result.limit == "memory" and "MemoryError" in result.stderr


def test_a_fork_bomb_is_stopped_at_the_process_limit(sandbox):
    code = ("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            time.sleep(3)\n"
            "            os._exit(0)\n        n += 1\nexcept OSError as exc:\n    print('stopped after', n, exc.errno)")
    # Root's programs run as a user of their own; another user's share comes on top of what that user runs.
    limit = LIMITS.processes if os.geteuid() == 0 else LIMITS.processes + processes_of(os.getuid())
    result = run(sandbox, code)
    assert result.stdout.startswith("stopped after") and int(result.stdout.split()[2]) < limit
    assert result.stdout.split()[3] == "11"  # EAGAIN


def test_output_past_the_limit_is_cut_and_ends_the_program(sandbox):
    result = run(sandbox, "import sys\nwhile True:\n    sys.stdout.write('x' * 1000)\n    sys.stdout.flush()")
    assert result.limit == "output" and len(result.stdout) == LIMITS.output_bytes


def test_no_network_not_even_the_hosts_loopback(sandbox):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = ("import socket\nfor address in [('127.0.0.1', %d), ('1.1.1.1', 53)]:\n    try:\n"
                "        socket.create_connection(address, timeout=2)\n        print('connected', address)\n"
                "    except OSError as exc:\n        print('refused', exc.errno)") % port
        result = run(sandbox, code)
    assert result.stdout.count("refused") == 2, result.stdout


def test_the_parent_cannot_be_killed(sandbox):
    code = (f"import os, signal\nfor target in ({os.getpid()}, {os.getppid()}, 1):\n    try:\n"
            "        os.kill(target, signal.SIGKILL)\n        print('sent', target)\n"
            "    except OSError as exc:\n        print('refused', target, exc.errno)")
    result = run(sandbox, code)
    assert "sent " + str(os.getpid()) not in result.stdout and "sent " + str(os.getppid()) not in result.stdout
    assert run(sandbox, "print('still serving')").stdout == "still serving\n"


def test_files_outside_its_directory_are_out_of_reach(tmp_path):
    """bubblewrap only: the run's outputs (a checkpoint here) do not exist for the program, and it writes nowhere
    but its own directory, which is gone after the run. (The fallback shows the host's files: docs/agents.md.)"""
    checkpoint = tmp_path / "checkpoints" / "global_step_10" / "model.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_text("weights")
    code = (f"import os\nfor path in ['{checkpoint}', '{os.__file__}']:\n    try:\n        open(path).read(1)\n"
            "        print('read', path)\n    except OSError as exc:\n        print('closed', path, exc.errno)\n"
            f"for path in ['{tmp_path}/planted', '/usr/planted', 'mine']:\n    try:\n"
            "        open(path, 'w').write('x')\n        print('wrote', path)\n    except OSError as exc:\n"
            "        print('refused', path, exc.errno)")
    with Sandbox(LIMITS) as box:
        result = run(box, code)
    assert f"closed {checkpoint}" in result.stdout and f"read {os.__file__}" in result.stdout
    assert "refused /usr/planted" in result.stdout and "wrote mine" in result.stdout
    assert not (tmp_path / "planted").exists() and not os.path.exists("/usr/planted")


def test_workers_bound_how_many_programs_run_at_once():
    code = "import time\nprint(time.time())\ntime.sleep(1)\nprint(time.time())"
    for workers, expected in ((1, 1), (3, 3)):
        with Sandbox(replace(LIMITS, workers=workers)) as box:
            spans = [tuple(map(float, r.stdout.split())) for r in box.run_many([Program(code)] * 3)]
        overlap = max(sum(start <= t < end for start, end in spans) for t, _ in spans)
        assert overlap == expected, spans


def test_the_interpreter_is_the_configured_one(tmp_path):
    with Sandbox(replace(LIMITS, python=sys.executable)) as box:
        assert run(box, "import sys; print(sys.executable)").stdout.strip() == sys.executable
    with pytest.raises(SandboxUnavailable):
        Sandbox(replace(LIMITS, python="/nonexistent/python3", backend="bwrap"))


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read()
    except OSError:
        return ""
