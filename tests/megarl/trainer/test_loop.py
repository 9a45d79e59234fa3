"""`megarl train` end to end on CPU: a tiny model with a real tokenizer, GSM8K-format parquet, transformers
rollout engines; GRPO with a KL loss under torchrun (TP=2) and PPO with a critic under Ray run their steps and
write every step's metrics to metrics.jsonl, memory peaks included."""

import sys

import pytest

from megarl.trainer.perf import memory_metrics
from parallel.topology import free_port
from tests.helpers import overrides, read_metrics, run_command

COMMON = {"actor/pg_loss", "actor/entropy", "actor/ppo_kl", "actor/pg_clipfrac", "actor/grad_norm", "actor/lr",
          "critic/score/mean", "critic/rewards/mean", "critic/advantages/mean", "critic/returns/mean",
          "response_length/mean", "response_length/clip_ratio", "rollout/logprob_mult_error", "timing_s/gen",
          "timing_s/reward", "timing_s/old_log_prob", "timing_s/adv", "timing_s/update_actor",
          "timing_s/update_weights", "timing_s/step", "reward/num_errors"}


def assert_cpu_memory_logged(steps):
    """On CPU the workers' memory samplers (parallel/memory.py) have the node's RAM and no device to read."""
    for step in steps:
        assert [key for key in step if key.startswith("memory/")] == ["memory/host/peak_gb"]
        assert step["memory/host/peak_gb"] > 0


def test_memory_metrics_take_each_phase_peak_of_the_fullest_gpu():
    gb = 10**9
    ranks = [{"gen": {"device": 3 * gb, "host": 9 * gb, "reserved": gb},
              "reward": {"device": 8 * gb, "host": 9 * gb, "reserved": gb},
              "update_weights": {"device": gb, "host": gb, "reserved": gb},
              "step": {"device": 8 * gb, "host": 5 * gb, "reserved": gb}},
             {"gen": {"device": 2 * gb, "host": gb, "reserved": 2 * gb},
              "reward": {"device": gb, "host": gb, "reserved": gb},
              "update_weights": {"device": 2 * gb, "host": gb, "reserved": gb},
              "step": {"device": 2 * gb, "host": 7 * gb, "reserved": gb}}]
    assert memory_metrics(ranks) == {"memory/gen/peak_gb": 3.0, "memory/gen/reserved_gb": 2.0,
                                     "memory/sync/peak_gb": 2.0, "memory/sync/reserved_gb": 1.0,
                                     "memory/host/peak_gb": 7.0}
    without_gpus = [{window: {"device": None, "host": gb, "reserved": None} for window in ("gen", "step")}]
    assert memory_metrics(without_gpus) == {"memory/host/peak_gb": 1.0}


def test_grpo_with_kl_loss_under_torchrun(setup, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "-m", "megarl.train",
           *overrides(setup, out, "algorithm.adv_estimator=grpo", "actor.use_kl_loss=true",
                      "actor.megatron.tensor_model_parallel_size=2", "actor.ppo_mini_batch_size=2",
                      "trainer.logger=[console,tensorboard,wandb]", "algorithm.rollout_correction.rollout_is=token",
                      "algorithm.rollout_correction.rollout_rs=geometric",
                      "algorithm.rollout_correction.rollout_rs_threshold=1.01")]
    proc = run_command(cmd, timeout=480)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    steps = read_metrics(out)
    assert [s["step"] for s in steps] == [1, 2]
    assert COMMON | {"actor/kl_loss", "timing_s/ref"} <= steps[0].keys()
    assert steps[0]["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-6)  # one mini-batch: its update starts at ratio 1
    assert steps[0]["rollout/logprob_mult_error"] <= 1.001
    # The transformers engine samples from the trainer's own distribution: weights ≈ 1, nothing rejected.
    assert steps[0]["rollout_corr/rollout_is_mean"] == pytest.approx(1.0, abs=1e-2)
    assert steps[0]["rollout_corr/rollout_rs_masked_fraction"] == 0
    assert_cpu_memory_logged(steps)
    assert "step 2/2" in proc.stdout
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert list((out / "wandb").glob("offline-run-*"))


def test_ppo_with_a_critic_under_ray(setup, tmp_path):
    out = tmp_path / "run"
    proc = run_command([sys.executable, "-m", "megarl.train", *overrides(setup, out)], timeout=480)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    steps = read_metrics(out)
    assert [s["step"] for s in steps] == [1, 2]
    assert COMMON | {"critic/vf_loss", "critic/vf_clipfrac", "critic/values/mean", "timing_s/values",
                     "timing_s/update_critic"} <= steps[0].keys()
    assert_cpu_memory_logged(steps)
