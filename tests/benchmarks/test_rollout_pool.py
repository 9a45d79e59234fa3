"""benchmarks/rollout_pool.py: the ahead run is the recipe on half its GPUs with the engines on the other half a step
ahead (a valid recipe), and its overlap efficiency is the step over the larger of generation alone and the step's
training after the responses arrived."""

import sys

import pytest

from tests.helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from rollout_pool import ahead_overrides, ahead_summary, measured, run_summary  # noqa: E402

from megarl.config import load_config  # noqa: E402

RECIPE = REPO_ROOT / "recipes/qwen3_0_6b_grpo_gsm8k.yaml"


def test_the_ahead_run_splits_the_recipes_gpus_and_validates():
    cfg = load_config(RECIPE)
    assert cfg.trainer.n_gpus_per_node == 2 and cfg.actor.megatron.tensor_model_parallel_size == 2
    ahead = load_config(RECIPE, ahead_overrides(cfg))
    assert (ahead.world_size, ahead.rollout_world_size, ahead.gpus) == (1, 1, 2)
    assert ahead.actor.megatron.tensor_model_parallel_size == ahead.rollout.tensor_model_parallel_size == 1
    assert ahead.trainer.staleness == 1 and ahead.algorithm.rollout_correction.rollout_is == "token"
    own = load_config(RECIPE, ["algorithm.rollout_correction.rollout_rs=token"])
    assert not any(o.startswith("algorithm.rollout_correction") for o in ahead_overrides(own))
    with pytest.raises(SystemExit, match="give it 2 or more"):
        ahead_overrides(load_config(RECIPE, ["trainer.n_gpus_per_node=1", "actor.megatron.tensor_model_parallel_size=1",
                                             "rollout.tensor_model_parallel_size=1"]))


def step(seconds: float, gen: float, sync_wait: float = 0.0) -> dict:
    phases = {"gen": gen, "reward": 0.1, "old_log_prob": 0.5, "ref": 0.4, "adv": 0.0, "update_actor": 1.0,
              "sync_wait": sync_wait, "update_weights": 0.05}
    return {"timing_s/step": seconds, "perf/throughput": 100.0 / seconds, "update_weights/bytes_sent_gb": 1.2,
            "rollout_corr/staleness": 1.0, "rollout_corr/rollout_is_mean": 1.01,
            **{f"timing_s/{name}": value for name, value in phases.items()}}


def test_overlap_efficiency_is_the_step_over_the_larger_of_generation_and_training():
    steps = [step(2.2, 0.1), step(2.3, 0.2), step(2.1, 0.0)]
    row = ahead_summary(steps, gen_s=1.5)
    assert row["training_s"] == pytest.approx(2.05) and row["wait_for_gen_s"] == 0.1
    assert row["overlap_efficiency"] == pytest.approx(2.2 / 2.05)  # training is the longer side here
    assert ahead_summary(steps, gen_s=4.0)["overlap_efficiency"] == pytest.approx(2.2 / 4.0)
    assert ahead_summary(steps, gen_s=None)["overlap_efficiency"] is None  # no GPU: no engine alone to time
    assert row["sync_s"] == 0.05 and row["sync_gb"] == 1.2
    assert row["rollout_corr"] == {"rollout_corr/staleness": 1.0, "rollout_corr/rollout_is_mean": 1.01}
    assert run_summary(steps)["tokens_per_s_per_gpu"] == pytest.approx(100 / 2.2)


def test_waiting_for_the_engines_before_the_sync_is_neither_training_nor_the_sync():
    steps = [step(6.2, 0.1, sync_wait=4.0), step(6.3, 0.2, sync_wait=4.1), step(6.1, 0.0, sync_wait=3.9)]
    row = ahead_summary(steps, gen_s=6.0)
    assert row["training_s"] == pytest.approx(2.05) and row["sync_s"] == 0.05
    assert row["wait_for_gen_s"] == pytest.approx(0.1 + 4.0)
    assert row["overlap_efficiency"] == pytest.approx(6.2 / 6.0)


def test_the_ahead_runs_last_step_which_generates_nothing_ahead_is_left_out():
    metrics = [{"step": k} for k in range(1, 5)]
    assert [m["step"] for m in measured(metrics)] == [2, 3, 4]
    assert [m["step"] for m in measured(metrics, drained=1)] == [2, 3]
    with pytest.raises(SystemExit, match="before the last"):
        measured(metrics[:2], drained=1)
