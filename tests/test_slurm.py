"""launch/slurm/*.sbatch submitted for real (issue #18): `sbatch --wait` to the local SLURM cluster of
tests/slurm/setup_local_slurm.sh (two nodes, megarl-n0 and megarl-n1, on this host with one CPU each; CI starts
it), each running GRPO on the tiny model across both nodes, one process per node. Their metrics equal one node's
with both processes (plain torchrun), as tests/megarl/trainer/test_multinode.py checks without SLURM."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from parallel.topology import free_port
from tests.helpers import (ENV, GRPO_TWO_STEPS, REPO_ROOT, TWO_NODES, one_node_grpo_metrics, overrides,
                           run_metrics, write_tiny_rl_setup)

NODES = ["megarl-n0", "megarl-n1"]
SETUP = "tests/slurm/setup_local_slurm.sh"
# The #SBATCH lines ask for GPU nodes; on the local cluster: no GPUs, one CPU per node, a time limit (minutes).
CPU_JOB = ["--nodes=2", "--gpus-per-task=0", "--cpus-per-task=1", "--time=8"]


def local_cluster_nodes() -> list[str]:
    proc = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%N"], capture_output=True, text=True)
    return sorted(set(proc.stdout.split())) if proc.returncode == 0 else []


def _reason_to_skip() -> str | None:
    if os.environ.get("CI"):
        return None  # .ci/run installs slurm-wlm and starts the cluster: here the test must run
    if shutil.which("sbatch") is None:
        return f"sbatch is not installed here (CI installs slurm-wlm and starts a local cluster: sudo {SETUP})"
    if local_cluster_nodes() != NODES:
        return f"no local SLURM cluster with nodes {NODES} (start one: sudo {SETUP})"
    return None


SKIP = _reason_to_skip()
pytestmark = pytest.mark.skipif(SKIP is not None, reason=str(SKIP))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    assert local_cluster_nodes() == NODES, f"the local SLURM cluster is not up: run sudo {SETUP}"
    return write_tiny_rl_setup(tmp_path_factory.mktemp("slurm"))


@pytest.fixture(scope="module")
def one_node(setup, tmp_path_factory):
    return one_node_grpo_metrics(setup, tmp_path_factory.mktemp("one_node"))


def sbatch(script: str, out: Path, setup: Path, **env: str) -> str:
    """`sbatch --wait` from the repository root (as the scripts' headers say), this Python first on PATH; the
    job's log."""
    job_env = {**ENV, "PYTHON": sys.executable, **env,
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    log = out / "slurm.out"
    cmd = ["sbatch", "--wait", *CPU_JOB, f"--output={log}", script, *overrides(setup, out, *GRPO_TWO_STEPS, *TWO_NODES)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=job_env, capture_output=True, text=True, timeout=600)
    job_log = log.read_text() if log.exists() else "(no job log)"
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}\n{job_log[-6000:]}"
    return job_log


def test_torchrun_sbatch_on_two_nodes(setup, one_node, tmp_path):
    log = sbatch("launch/slurm/torchrun.sbatch", tmp_path, setup, GPUS_PER_NODE="1", MASTER_PORT=str(free_port()))
    assert "megarl: torchrun on 2 nodes × 1 processes" in log
    assert run_metrics(tmp_path) == one_node


def test_ray_cluster_sbatch_on_two_nodes(setup, one_node, tmp_path):
    log = sbatch("launch/slurm/ray_cluster.sbatch", tmp_path, setup, RAY_PORT=str(free_port()),
                 RAY_DASHBOARD_PORT=str(free_port()), RAY_AGENT_PORT=str(free_port()), JOIN_TIMEOUT_S="120")
    assert "2 nodes × 0 GPUs" in log and "succeeded" in log
    assert run_metrics(tmp_path) == one_node
