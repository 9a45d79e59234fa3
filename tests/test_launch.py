"""launch/: every script parses (bash -n) and passes shellcheck; torchrun.sh and ray_submit.sh run the
controller test's driver for real (ray_submit.sh against a Ray cluster started with `ray start`)."""

import json
import os
import shutil
import socket
import subprocess

import pytest

from tests.helpers import REPO_ROOT, make_model

SCRIPTS = sorted([*REPO_ROOT.glob("launch/*.sh"), *REPO_ROOT.glob("launch/slurm/*.sbatch")])
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "ENTRY": "tests.parallel.step_job"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_launchers_exist():
    names = {p.relative_to(REPO_ROOT).as_posix() for p in SCRIPTS}
    assert names == {"launch/torchrun.sh", "launch/ray_submit.sh", "launch/slurm/ray_cluster.sbatch",
                     "launch/slurm/torchrun.sbatch", "launch/tiny_cpu.sh"}
    assert (REPO_ROOT / "launch/runtime_env.yaml").is_file()


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses_and_has_a_usage_header(script):
    subprocess.run(["bash", "-n", str(script)], check=True)
    header = script.read_text().splitlines()[1]
    assert header.startswith("# ") and len(header) > 20, f"{script.name} needs a header saying how to use it"


@pytest.mark.skipif(shutil.which("shellcheck") is None and not os.environ.get("CI"),
                    reason="shellcheck is not installed here (CI installs it: apt-get install shellcheck)")
def test_shellcheck():
    proc = subprocess.run(["shellcheck", *map(str, SCRIPTS)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model("qwen2", tmp_path_factory.mktemp("launch") / "model")


def test_torchrun_sh_runs_the_driver_on_every_rank(model_dir, tmp_path):
    env = {**ENV, "NPROC_PER_NODE": "2", "MASTER_PORT": str(free_port())}
    proc = subprocess.run([str(REPO_ROOT / "launch/torchrun.sh"), str(model_dir), str(tmp_path / "out.json")],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["launcher"] == "torchrun" and [w["rank"] for w in result["workers"]] == [0, 1]


def test_ray_submit_sh_runs_a_job_on_a_running_cluster(model_dir, tmp_path):
    dashboard = free_port()
    start = ["ray", "start", "--head", "--num-cpus", "2", "--port", str(free_port()),
             "--dashboard-port", str(dashboard), "--disable-usage-stats"]
    subprocess.run(start, env=ENV, check=True, capture_output=True, timeout=120)
    try:
        env = {**ENV, "RAY_ADDRESS": f"http://127.0.0.1:{dashboard}"}
        proc = subprocess.run([str(REPO_ROOT / "launch/ray_submit.sh"), str(model_dir), str(tmp_path / "out.json")],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    finally:
        subprocess.run(["ray", "stop", "--force"], env=ENV, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "succeeded" in proc.stdout + proc.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["launcher"] == "ray" and [w["rank"] for w in result["workers"]] == [0, 1]


def test_torchrun_sh_stops_a_recipe_mistake_with_one_line(tmp_path):
    env = {**os.environ, "NPROC_PER_NODE": "2", "MASTER_PORT": str(free_port())}
    proc = subprocess.run([str(REPO_ROOT / "launch/torchrun.sh"), "--recipe", "recipes/tiny_cpu_grpo.yaml",
                           "rollout.nn=2", f"trainer.output_dir={tmp_path}"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: override: unknown key 'rollout.nn'")
    assert "Traceback" not in proc.stderr and "ChildFailedError" not in proc.stderr
