"""`launch/tiny_cpu.sh judge` end to end on CPU (slow): the SFT'd tiny model, fine-tuned into a judge of right and
wrong sums, rewards GRPO alone (reward.judge, yes_no), and the rule-checked accuracy rises from ≤ 0.4 to ≥ 0.8, in
training (the last five steps' mean) and in validation (greedy, on held-out prompts)."""

import pytest

from tests.test_tiny_recipes import assert_healthy, run_recipe

# The judge's fine-tuning and 30 steps, after the warm start that tests/test_tiny_recipes.py shares (made here when
# this file runs first).
# Out of CI's default run until the suite's time is cut (pytest.ini's beyond_ci): `python -m pytest -m beyond_ci tests`.
pytestmark = [pytest.mark.timeout(1200), pytest.mark.beyond_ci]


def test_grpo_rewarded_by_a_judge_alone_learns_right_sums(tiny_workdir):
    steps, validation = run_recipe(tiny_workdir, "judge", "ray", timeout=1150)
    for step in steps:  # reward.rule_weight=0: the judge's probability of Y is the whole reward
        assert step["critic/score/mean"] == pytest.approx(step["reward/judge_score/mean"], abs=1e-5)
        assert step["reward/judge_unparsed"] == 0
    rule = [s["reward/rule_score/mean"] for s in steps]
    assert rule[0] <= 0.4 and sum(rule[-5:]) / 5 >= 0.8, rule
    assert validation[0] <= 0.4 and validation[max(validation)] >= 0.8, validation
    assert_healthy(steps, validation)
