"""`rollout.mode=async` end to end on CPU: responses requested one by one and scored on the engines' owners as they
finish (here by a user's reward function that takes 50 ms a sample, in reward pools beside the engines) train
exactly as the synchronous mode does for the same seed: every metric but the timings is equal, step by step. The
function's time moves from the reward phase into generation."""

import sys

from parallel.topology import free_port
from tests.helpers import overrides, read_metrics, run_command

TIMED = ("timing_s/", "perf/", "memory/", "update_weights/stream_s")
SAMPLE_S = 0.05
# Scores like the GSM8K rule, in a reward pool; the exact-match key rides along as an extra (`acc`).
USER_REWARD = """
import time
from megarl.rewards.registry import default_compute_score

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    time.sleep(0.05)
    score = default_compute_score(data_source, solution_str, ground_truth)
    return {"score": score + 0.25 * len(solution_str.split()), "acc": score}
"""


def train(setup, out, reward, *extra):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "megarl.train",
           *overrides(setup, out, "algorithm.adv_estimator=grpo", "rollout.n=4", "trainer.total_training_steps=3",
                      f"reward.function={reward}:compute_score", "reward.workers=2", *extra)]
    proc = run_command(cmd, timeout=480)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    return read_metrics(out)


def untimed(steps):
    return [{k: v for k, v in step.items() if not k.startswith(TIMED)} for step in steps]


def test_async_mode_trains_exactly_as_the_sync_mode(setup, tmp_path):
    reward = tmp_path / "user_reward.py"
    reward.write_text(USER_REWARD)
    sync = train(setup, tmp_path / "sync", reward)
    streamed = train(setup, tmp_path / "async", reward, "rollout.mode=async")
    assert [s["step"] for s in streamed] == [1, 2, 3]
    assert untimed(streamed) == untimed(sync)
    for sync_step, async_step in zip(sync, streamed):
        # 8 samples a step on 2 pool workers: ≥ 0.2 s of scoring after generation; in the async mode each engine's
        # 4 scored beside its generation (≥ 0.1 s on its 2 workers), and only their assembly left after it.
        assert sync_step["timing_s/reward"] >= 4 * SAMPLE_S
        assert async_step["timing_s/gen"] >= 2 * SAMPLE_S and async_step["timing_s/reward"] < 2 * SAMPLE_S
    assert {"critic/score/mean", "actor/pg_loss", "reward/num_errors", "reward/num_timeouts"} <= streamed[0].keys()
    assert len({s["critic/score/mean"] for s in streamed}) > 1  # the scores are the function's, and change
