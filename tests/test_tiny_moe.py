"""`launch/tiny_cpu.sh moe` end to end on CPU (slow): the tiny shape as a Qwen3-MoE (4 experts, 2 per token), its
experts split over the two processes (expert parallelism 2), SFT-warm-started and then GRPO-trained on the bundled
arithmetic task: the mean training reward rises from ≤ 0.4 to ≥ 0.8 and greedy validation with it."""

import pytest

from tests.test_tiny_recipes import assert_healthy, run_recipe

# Its own warm start (the MoE's SFT) and 30 steps under torchrun. Out of CI's default run until the suite's time is
# cut (pytest.ini's beyond_ci): `python -m pytest -m beyond_ci tests/test_tiny_moe.py`.
pytestmark = [pytest.mark.timeout(1200), pytest.mark.beyond_ci]


def test_grpo_teaches_a_mixture_of_experts_split_over_two_processes(tiny_workdir):
    steps, validation = run_recipe(tiny_workdir, "moe", "torchrun", timeout=1150)
    scores = [s["critic/score/mean"] for s in steps]
    assert scores[0] <= 0.4 and sum(scores[-3:]) / 3 >= 0.8, scores
    assert validation[0] <= 0.4 and validation[max(validation)] >= 0.8, validation
    assert all(s["rollout/logprob_mult_error"] < 1.01 for s in steps)  # every expert reached the engine each step
    assert_healthy(steps, validation)
