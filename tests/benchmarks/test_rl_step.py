"""benchmarks/rl_step.py's summary of a run's metrics: medians after the warm-up step, each phase's FLOP floor (the
critic's with its value head, not the vocabulary projection) and MFU, and the row's `mfu` by phase."""

import sys

import pytest

from tests.helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from rl_step import summary  # noqa: E402

from megarl.config import load_config  # noqa: E402
from megarl.models.shapes import hf_config  # noqa: E402
from megarl.trainer.perf import training_flops  # noqa: E402

PEAK = 1e15


def step_metrics(step: int, seconds: float) -> dict:
    phases = ("gen", "old_log_prob", "ref", "values", "update_critic", "update_actor", "update_weights")
    return {"step": step, "timing_s/step": 10 * seconds, "perf/throughput": 1000 / seconds,
            "perf/total_num_tokens": 64 * 600, "response_length/mean": 500,
            **{f"timing_s/{name}": seconds for name in phases}}


def test_medians_skip_the_warm_up_step_and_the_critics_floor_has_its_value_head():
    cfg = load_config(REPO_ROOT / "recipes/qwen2_5_0_5b_ppo_gsm8k.yaml", [])
    model = hf_config("qwen2.5-0.5b")
    row = summary(cfg, model, [step_metrics(1, 9.0), step_metrics(2, 1.0), step_metrics(3, 2.0),
                               step_metrics(4, 3.0)], PEAK)
    assert row["steps_measured"] == 3 and row["step_s_median"] == 20.0
    lengths = [600] * 64
    actor, critic = training_flops(model, lengths), training_flops(model, lengths, value_head=True)
    assert critic < 0.8 * actor  # Qwen2.5-0.5B's vocabulary projection is over a quarter of its matmul weights
    expected = {"old_log_prob": actor / 3, "ref": actor / 3, "values": critic / 3, "update_actor": actor,
                "update_critic": critic}
    for name, flops in expected.items():
        assert row["phases"][name]["floor_s"] == pytest.approx(flops / PEAK)
        assert row["mfu"][name] == pytest.approx(flops / PEAK / 2.0)
    assert "gen" not in row["mfu"] and row["phases"]["gen"]["s"] == 2.0
