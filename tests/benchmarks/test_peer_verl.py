"""benchmarks/peer_verl.py without a GPU: verl's console metrics (step lines of a real run on an H200, trimmed to some
keys, Ray's colours kept) read into medians over the steps after the first; megarl's recipe mapped onto verl's keys,
each from the loaded config, so both sides train the same configuration."""

import sys
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from peer_verl import verl_overrides, verl_side, verl_steps  # noqa: E402

from megarl.config import load_config  # noqa: E402

LOG = Path(__file__).parent / "data/verl_steps.log"


def test_verl_step_lines_become_medians_over_the_steps_after_the_first():
    steps = verl_steps(LOG.read_text())
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert steps[1]["timing_s/gen"] == pytest.approx(2.4177874370000154)
    side = verl_side(steps, peak_gb=75.8)
    assert side["steps_measured"] == 2 and side["per_step"]["step"] == [2, 3]
    assert side["step_s_median"] == pytest.approx((steps[1]["timing_s/step"] + steps[2]["timing_s/step"]) / 2)
    assert side["phases_s"]["update_actor"] == pytest.approx(
        (steps[1]["timing_s/update_actor"] + steps[2]["timing_s/update_actor"]) / 2)
    assert "step" not in side["phases_s"] and side["response_length_mean"] == 512.0
    with pytest.raises(SystemExit, match="at least two"):
        verl_side(steps[:1], peak_gb=0.0)


def test_the_recipe_maps_onto_verls_keys():
    cfg = load_config(REPO_ROOT / "recipes/qwen2_5_0_5b_ppo_gsm8k.yaml", ["data.train_batch_size=32"])
    keys = dict(o.split("=", 1) for o in verl_overrides(cfg, Path("/m"), Path("/d"), steps=4))
    assert keys["data.train_batch_size"] == "32" and keys["data.max_response_length"] == "512"
    assert keys["algorithm.adv_estimator"] == "gae" and keys["algorithm.kl_ctrl.kl_coef"] == "0.001"
    assert keys["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == "16384"
    assert keys["critic.ppo_max_token_len_per_gpu"] == "32768" and keys["critic.optim.lr"] == "1e-05"
    assert keys["actor_rollout_ref.rollout.gpu_memory_utilization"] == "0.4"
    assert keys["actor_rollout_ref.model.path"] == keys["critic.model.path"] == "/m"
    assert keys["data.train_files"] == "/d/train.parquet" and keys["trainer.total_training_steps"] == "4"
    assert keys["+actor_rollout_ref.rollout.engine_kwargs.sglang.preferred_sampling_params"] == \
        "'{\"ignore_eos\": true}'"
