"""Training-health checks: unit cases on metric sequences, and a run with a learning rate that collapses the policy
warns and, with the check in trainer.health.stop_on, stops after checkpointing the step."""

import math
import sys

import pytest

from megarl.config import load_config
from megarl.config.schema import HEALTH_CHECKS
from megarl.trainer.health import CHECKS, HealthMonitor
from tests.helpers import overrides, read_metrics, run_command


def monitor(*extra):
    said = []
    health = load_config(overrides=list(extra)).trainer.health
    return HealthMonitor(health, said.append), said


def test_healthy_steps_breach_nothing_and_unmeasured_checks_are_not_reported():
    health, said = monitor()
    out = health(1, {"actor/ppo_kl": 0.02, "actor/grad_norm": 3.0, "actor/entropy": 0.8})
    assert out == {"health/ppo_kl": 0.0, "health/grad_norm": 0.0, "health/entropy_collapse": 0.0} and not said


def test_each_breach_is_one_line_naming_the_fix():
    health, said = monitor()
    out = health(1, {"actor/ppo_kl": 0.2, "actor/grad_norm": math.nan, "response_length/clip_ratio": 0.5,
                     "rollout/logprob_mult_error": 1.2})
    assert set(out.values()) == {1.0} and len(said) == 4
    assert "raise the KL coefficient" in said[0] and "lower actor.optim.lr" in said[1]
    assert "50% of responses hit data.max_response_length" in said[2]
    assert "algorithm.rollout_correction" in said[3] and health.stop_reason is None


def test_log_probs_of_an_older_policy_are_no_mismatch():
    health, said = monitor()
    assert health(1, {"rollout/logprob_mult_error": 1.2, "rollout_corr/staleness": 0.0}) == {
        "health/logprob_mismatch": 1.0}
    assert health(2, {"rollout/logprob_mult_error": 1.2, "rollout_corr/staleness": 1.0}) == {
        "health/logprob_mismatch": 0.0}
    assert len(said) == 1


def test_entropy_collapse_is_relative_to_the_first_step():
    health, said = monitor("trainer.health.entropy_collapse_ratio=0.5")
    assert health(1, {"actor/entropy": 2.0}) == {"health/entropy_collapse": 0.0}
    assert health(2, {"actor/entropy": 1.2}) == {"health/entropy_collapse": 0.0}
    assert health(3, {"actor/entropy": 0.9}) == {"health/entropy_collapse": 1.0}
    assert said == ["health (entropy_collapse) at step 3: actor/entropy=0.9 fell below 0.5 × its first value 2: the "
                    "policy is collapsing onto few answers: raise actor.entropy_coeff or rollout.temperature, or use "
                    "clip-higher (actor.clip_ratio_high)"]


def test_validation_stalls_after_patience_evaluations_without_a_new_best():
    health, said = monitor("trainer.health.val_patience=2")
    scores = {5: 0.5, 10: 0.7, 15: 0.7, 20: 0.65, 25: 0.8}
    out = [health(step, {"val-core/gsm8k/reward/mean@1": score})["health/val_stall"] for step, score in scores.items()]
    assert out == [0.0, 0.0, 0.0, 1.0, 0.0]
    assert "has not improved for 2 evaluations (best 0.7 at step 10)" in said[0]


def test_a_stop_on_check_sets_the_reason_and_others_only_warn():
    health, _ = monitor("trainer.health.stop_on=[grad_norm]")
    health(1, {"actor/ppo_kl": 0.5})
    assert health.stop_reason is None
    health(2, {"actor/grad_norm": 50.0})
    assert health.stop_reason.startswith("trainer.health.stop_on has grad_norm: actor/grad_norm=50 > 10")


def test_checks_are_off_with_enable_false_and_stop_on_names_known_checks():
    health, said = monitor("trainer.health.enable=false")
    assert health(1, {"actor/grad_norm": 1e9}) == {} and not said
    with pytest.raises(Exception, match=r"trainer.health.stop_on='grad' is not one of: ppo_kl, grad_norm"):
        load_config(overrides=["trainer.health.stop_on=[grad]"])


def test_stop_on_takes_the_names_of_the_checks_that_run():
    assert tuple(CHECKS) == HEALTH_CHECKS


def test_a_collapsing_run_warns_and_stops_with_its_checkpoint(setup, tmp_path):
    out, reward = tmp_path / "run", tmp_path / "length_reward.py"
    reward.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return len(solution_str) % 7 / 7\n")  # differs between responses: the policy moves
    proc = run_command([sys.executable, "-m", "megarl.train",
                        *overrides(setup, out, "algorithm.adv_estimator=grpo", "actor.optim.lr=10",
                                   f"reward.function={reward}:compute_score",
                                   "trainer.total_training_steps=4", "trainer.health.stop_on=[entropy_collapse]")],
                       timeout=480)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: stopped after step 2: trainer.health.stop_on has entropy_collapse: actor/entropy=")
    assert "health (entropy_collapse) at step 2:" in proc.stdout
    assert [s["health/entropy_collapse"] for s in read_metrics(out)] == [0.0, 1.0]
    assert (out / "checkpoints" / "global_step_2" / "trainer_state.json").is_file()


def test_zero_advantages_from_differing_scores_are_a_breach_naming_the_cause():
    health, said = monitor()
    tied = {"critic/advantages/max": 0.0, "critic/advantages/min": 0.0, "critic/score/varied_ratio": 0.0,
            "critic/score/max": 1.0, "critic/score/min": 0.0}
    assert health(1, tied) == {"health/zero_advantages": 0.0} and not said  # every group tied: nothing to learn
    overflow = {**tied, "critic/score/varied_ratio": 0.5, "critic/score/max": 1e30}
    assert health(2, overflow) == {"health/zero_advantages": 1.0}
    assert said == ["health (zero_advantages) at step 2: every advantage is 0 although the responses of 50% of the "
                    "prompts scored differently (critic/score in [0, 1e+30]), so the step trained nothing: scores "
                    "this large lose their differences in the advantage statistics; scale the reward down (to about "
                    "[-10, 10])"]
    health(3, {**overflow, "critic/score/max": 1.0})
    assert "algorithm.adv_estimator" in said[-1]
