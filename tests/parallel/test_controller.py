"""The controller end to end on CPU: the same driver program (tests/parallel/step_job.py) runs a megatron TP=2
step through a 2-worker Ray pool and under `torchrun --nproc-per-node 2` (without Ray importable) and gets
identical numbers; failures reach the driver with role, rank and traceback in seconds."""

import json
import subprocess
import sys

import pytest

from parallel.controller import PoolSpec
from parallel.launcher import start_cluster
from parallel.ray_backend import rank_envs
from tests.helpers import ENV, REPO_ROOT, make_model, run_job


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model("qwen2", tmp_path_factory.mktemp("controller") / "model")


def test_ray_pool_and_torchrun_compute_the_same_step(model_dir, tmp_path):
    results = {}
    for launcher, extra in (("ray", ()), ("torchrun", ("--without-ray",))):
        proc, _ = run_job(model_dir, tmp_path / f"{launcher}.json", launcher, *extra)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
        results[launcher] = json.loads((tmp_path / f"{launcher}.json").read_text())
    ray, torchrun = results["ray"], results["torchrun"]
    assert (ray["launcher"], torchrun["launcher"]) == ("ray", "torchrun")
    assert not torchrun["ray_imported"]
    for key in ("logprobs_before", "logprobs_after", "grad_norm", "loss"):
        assert ray[key] == torchrun[key], key
    assert ray["logprobs_after"] != ray["logprobs_before"] and ray["grad_norm"] > 0
    assert ray["all_reduce"] == torchrun["all_reduce"] == 3.0
    for run in (ray, torchrun):  # roles colocated in one process share its mesh; another mesh is refused
        assert run["colocated_reference_logprobs"] == run["logprobs_before"]
        assert run["other_mesh_error"].startswith("critic.__init__ failed on rank ")
        assert "must run in its own resource pool" in run["other_mesh_error"]
    for workers in (ray["workers"], torchrun["workers"]):
        assert [w["rank"] for w in workers] == [0, 1] and {w["world_size"] for w in workers} == {2}
        assert [w["local_rank"] for w in workers] == ["0", "1"] and len({w["master"] for w in workers}) == 1


@pytest.mark.parametrize("how, message", [("raise", "RuntimeError: deliberate failure on rank 1"),
                                          ("exit", "the worker process died")])
def test_ray_worker_failure_stops_the_run_with_its_traceback(model_dir, tmp_path, how, message):
    proc, _ = run_job(model_dir, tmp_path / "fail.json", "ray", "--fail-rank", "1", "--fail-how", how)
    result = json.loads((tmp_path / "fail.json").read_text())
    assert proc.returncode == 1
    assert (result["role"], result["rank"]) == ("actor", 1)
    assert result["error"].startswith("actor.fail_on failed on rank 1 (node ")
    assert message in result["error"]
    if how == "raise":
        assert 'step_worker.py", line' in result["error"] and "in fail_on" in result["error"]
    assert result["seconds"] < 10  # rank 0 is still blocked in a collective with a 120 s timeout


def test_torchrun_worker_failure_stops_the_job_with_its_traceback(model_dir, tmp_path):
    proc, seconds = run_job(model_dir, tmp_path / "fail.json", "torchrun", "--fail-rank", "1")
    assert proc.returncode != 0
    assert "actor.fail_on failed on rank 1" in proc.stderr
    assert "RuntimeError: deliberate failure on rank 1" in proc.stderr
    assert seconds < 60  # well before rank 0's collective timeout (120 s) could end it


def test_collectives_time_out_instead_of_hanging(tmp_path):
    out = tmp_path / "timeout.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           str(REPO_ROOT / "tests/parallel/timeout_worker.py"), str(out)]
    subprocess.run(cmd, cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    result = json.loads(out.read_text())
    assert "Timed out" in result["outcome"] and 2.5 < result["seconds"] < 10


def test_ray_ranks_select_their_assigned_gpu():
    infos = [{"node_ip": "10.0.0.1", "free_port": 4000, "gpu_ids": [g], "visible_devices": None} for g in ("3", "2")]
    infos += [{"node_ip": "10.0.0.2", "free_port": 5000, "gpu_ids": [g], "visible_devices": "4,5,6,7"}
              for g in ("6", "4")]
    infos += [{"node_ip": "10.0.0.3", "free_port": 6000, "gpu_ids": ["5"], "visible_devices": "5"}]  # narrowed
    envs = rank_envs(infos, use_gpu=True)
    assert [e["LOCAL_RANK"] for e in envs] == ["3", "2", "2", "0", "0"]
    assert {e["MASTER_ADDR"] + ":" + e["MASTER_PORT"] for e in envs} == {"10.0.0.1:4000"}
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3", "4"]
    assert [e["LOCAL_WORLD_SIZE"] for e in envs] == ["2", "2", "2", "2", "1"]
    assert [e["LOCAL_RANK"] for e in rank_envs(infos, use_gpu=False)] == ["0", "1", "0", "1", "0"]


def test_torchrun_starts_as_many_processes_as_the_pools_have_gpus():
    with pytest.raises(ValueError, match=r"torchrun started 1 processes but the pools have 2 GPUs \(main 1, critic 1\)"):
        start_cluster([PoolSpec("main", (1,)), PoolSpec("critic", (1,))], "torchrun")
    with pytest.raises(ValueError, match="torchrun started 1 processes but pool 'main' has 2 GPUs"):
        start_cluster([PoolSpec("main", (2,))], "torchrun")


def test_under_torchrun_a_second_pool_serves_the_drivers_calls(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "3", "-m", "tests.parallel.served_job",
           str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.json", "rank1.json"]  # the served rank: none
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    where = ranks[0]["where"]
    assert ranks[1]["where"] == where and len(where) == 1  # every driver rank sees the served rank's answer
    assert where[0]["pid"] not in {r["pid"] for r in ranks} and (where[0]["rank"], where[0]["world"]) == (0, 1)
    assert [r["world"] for r in ranks] == [2, 2]  # each pool is a world of its own
    assert all(r["driver_before_served"] for r in ranks)  # the served call was in flight meanwhile
    assert ranks[0]["error"] == ranks[1]["error"] == {"role": "served", "method": "fail", "rank": 0,
                                                      "cause": "ValueError: the served rank's own error"}


def test_once_computes_on_rank_zero_and_shares_the_value_and_the_error(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "tests.parallel.once_job",
           str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-5000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["value"] == ranks[1]["value"] == {"pid": ranks[0]["pid"], "rank": 0}
    assert [r["calls"] for r in ranks] == [1, 0]  # computed once, by rank 0
    assert [r["error"] for r in ranks] == ["only rank 0 ran this"] * 2
