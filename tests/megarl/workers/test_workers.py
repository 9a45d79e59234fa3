"""Actor and rollout roles colocated on the controller (2 CPU processes, transformers engines): after a weight
sync, the engines' samples get the same log-probs from the actor (old_log_probs) as from the engine, with
identical results under Ray and under torchrun."""

import json
import sys

import pytest

from tests.helpers import make_model, run_command


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model("qwen3", tmp_path_factory.mktemp("workers") / "model")


def run(model_dir, out, launcher, *extra) -> dict:
    prefix = [sys.executable, "-m"]
    if launcher == "torchrun":
        prefix += ["torch.distributed.run", "--nproc-per-node", "2", "-m"]
    cmd = [*prefix, "tests.megarl.workers.rollout_job", str(model_dir), str(out), *extra]
    proc = run_command(cmd, timeout=300)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return json.loads(out.read_text())


def test_generate_then_actor_log_probs_under_both_launchers(model_dir, tmp_path):
    torchrun = run(model_dir, tmp_path / "torchrun.json", "torchrun", "--without-ray")
    ray = run(model_dir, tmp_path / "ray.json", "ray")
    assert (torchrun["launcher"], ray["launcher"], torchrun["ray_imported"]) == ("torchrun", "ray", False)
    for key in ("uid", "data_source", "responses", "response_mask", "finish_reason", "greedy",
                "rollout/logprob_max_abs_diff"):
        assert torchrun[key] == ray[key], key
    assert torchrun["engines"] == 2  # training TP 2 → two rollout engines of TP 1
    assert torchrun["uid"] == ["0", "0", "1", "1", "2", "2", "3", "3"]  # rollout.n=2 responses per prompt
    assert torchrun["rollout/logprob_max_abs_diff"] <= 1e-5
    assert torchrun["greedy_uid"] == ["0", "1", "2", "3"]  # validation: val_kwargs.n=1, greedy
    assert "update_weights/stream_s" in torchrun["sync_metrics"]


def test_one_engine_over_the_training_tp_group(model_dir, tmp_path):
    result = run(model_dir, tmp_path / "tp2.json", "torchrun", "--rollout-tp", "2", "--without-ray")
    assert result["engines"] == 1 and result["rollout/logprob_max_abs_diff"] <= 1e-5
