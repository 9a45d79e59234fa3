"""GPU (nvidia-h200-x2): the Ray backend places 2 workers on 2 GPUs, runs NCCL all-reduces and the TP=2
megatron step of tests/parallel/step_job.py; torchrun runs the same step for comparison.

Rows for benchmarks/results/ go to $MEGARL_RESULTS_DIR/controller_gpu.json when it is set."""

import datetime
import json
import math
import os
import subprocess

import pytest
import torch

from tests.helpers import make_model, run_job

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs (nvidia-h200-x2)")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model("qwen2", tmp_path_factory.mktemp("controller_gpu") / "model")


def test_ray_places_two_gpu_workers_and_runs_nccl_and_the_tp2_step(model_dir, tmp_path):
    runs, seconds = {}, {}
    for launcher, extra in (("ray", ()), ("torchrun", ("--without-ray",))):
        proc, seconds[launcher] = run_job(model_dir, tmp_path / f"{launcher}.json", launcher, *extra, timeout=600)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
        runs[launcher] = json.loads((tmp_path / f"{launcher}.json").read_text())
    ray = runs["ray"]
    workers = ray["workers"]
    assert {w["backend"] for w in workers} == {"nccl"}
    assert len({w["gpu_uuid"] for w in workers}) == 2, workers  # two processes, two distinct GPUs
    assert sorted(w["device"] for w in workers) == [0, 1]
    assert [w["device_count"] for w in workers] == [2, 2]  # each sees its neighbour's GPU too (for rollout engines)
    assert ray["all_reduce"] == 3.0 and ray["all_reduce_bus_gb_per_s"] > 10
    assert math.isfinite(ray["grad_norm"]) and ray["grad_norm"] > 0
    assert ray["logprobs_after"] != ray["logprobs_before"]
    diff = max(abs(a - b) for rows in ("logprobs_before", "logprobs_after")
               for x, y in zip(ray[rows], runs["torchrun"][rows]) for a, b in zip(x, y))
    _write_rows(ray, runs["torchrun"], diff, seconds)
    assert diff <= 1e-3 and abs(ray["grad_norm"] - runs["torchrun"]["grad_norm"]) <= 1e-3 * ray["grad_norm"]


def _write_rows(ray, torchrun, diff, seconds):
    out = os.environ.get("MEGARL_RESULTS_DIR")
    if not out:
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    row = {
        "date": datetime.date.today().isoformat(), "commit": os.environ.get("MEGARL_COMMIT", commit),
        "machine": "nvidia-h200-x2", "what": "controller",
        "command": "MEGARL_RESULTS_DIR=$OUT python -m pytest tests/gpu/test_controller_gpu.py",
        "model_shape": "tiny-qwen2 (2 layers, hidden 64)", "dtype": "bf16", "tp": 2, "pp": 1, "cp": 1, "dp": 1,
        "workers": ray["workers"], "all_reduce_sum_of_rank_plus_one": ray["all_reduce"],
        "all_reduce_bus_gb_per_s": ray["all_reduce_bus_gb_per_s"],
        "grad_norm": ray["grad_norm"], "loss": ray["loss"],
        "job_s": {k: round(v, 1) for k, v in seconds.items()},
        "baseline": {"torchrun_grad_norm": torchrun["grad_norm"], "torchrun_loss": torchrun["loss"],
                     "torchrun_all_reduce_bus_gb_per_s": torchrun.get("all_reduce_bus_gb_per_s"),
                     "logprob_max_abs_diff_vs_torchrun": diff},
    }
    with open(os.path.join(out, "controller_gpu.json"), "w") as f:
        json.dump([row], f, indent=1)
