"""Two nodes on one host, as a cluster sees them (issue #18: launches run for real): `torchrun --nnodes 2` with c10d
rendezvous, and a two-node Ray cluster (Ray's own `cluster_utils.Cluster`: a head and a second raylet with one
CPU each), each running GRPO on the tiny setup of conftest.py across both nodes, one process per node. Their
metrics equal one node's with both processes."""

import subprocess
import sys
from contextlib import ExitStack

import pytest

from parallel.topology import free_port
from tests.helpers import (ENV, GRPO_TWO_STEPS, REPO_ROOT, TWO_NODES, one_node_grpo_metrics, overrides,
                           run_metrics)


def torchrun(node_rank: int, port: int) -> list[str]:
    """One of two nodes, one process each, meeting through c10d rendezvous."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node_rank),
            "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"]


@pytest.fixture(scope="module")
def one_node(setup, tmp_path_factory):
    return one_node_grpo_metrics(setup, tmp_path_factory.mktemp("one_node"))


def test_torchrun_across_two_nodes(setup, one_node, tmp_path):
    port = free_port()
    args = ["-m", "megarl.train", *overrides(setup, tmp_path, *GRPO_TWO_STEPS, *TWO_NODES)]
    with ExitStack() as logs:  # files, not pipes: a full pipe would stall a node
        nodes = []
        for rank in (0, 1):
            log = logs.enter_context(open(tmp_path / f"node{rank}.log", "w"))
            nodes.append(subprocess.Popen([*torchrun(rank, port), *args], cwd=REPO_ROOT, env=ENV,
                                          stdout=subprocess.DEVNULL, stderr=log))
        codes = [node.wait(timeout=600) for node in nodes]
    assert codes == [0, 0], (tmp_path / "node0.log").read_text()[-5000:]
    assert run_metrics(tmp_path) == one_node


def test_ray_across_two_nodes(setup, one_node, tmp_path):
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        env = {**ENV, "RAY_ADDRESS": cluster.address}
        args = overrides(setup, tmp_path, *GRPO_TWO_STEPS, *TWO_NODES)
        proc = subprocess.run([sys.executable, "-m", "megarl.train", *args], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=600)
    finally:
        cluster.shutdown()
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert run_metrics(tmp_path) == one_node
