"""`megarl train` end to end on CPU: a tiny model with a real tokenizer, GSM8K-format parquet, transformers
rollout engines; GRPO with a KL loss under torchrun (TP=2) and PPO with a critic under Ray run their steps and
write every step's metrics to metrics.jsonl."""

import subprocess
import sys

import pytest

from tests.helpers import ENV, REPO_ROOT, overrides, read_metrics

COMMON = {"actor/pg_loss", "actor/entropy", "actor/ppo_kl", "actor/pg_clipfrac", "actor/grad_norm", "actor/lr",
          "critic/score/mean", "critic/rewards/mean", "critic/advantages/mean", "critic/returns/mean",
          "response_length/mean", "response_length/clip_ratio", "rollout/logprob_mult_error", "timing_s/gen",
          "timing_s/reward", "timing_s/old_log_prob", "timing_s/adv", "timing_s/update_actor",
          "timing_s/update_weights", "timing_s/step", "reward/num_errors"}


def test_grpo_with_kl_loss_under_torchrun(setup, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "megarl.train",
           *overrides(setup, out, "algorithm.adv_estimator=grpo", "actor.use_kl_loss=true",
                      "actor.megatron.tensor_model_parallel_size=2", "actor.ppo_mini_batch_size=2",
                      "trainer.logger=[console,tensorboard,wandb]")]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    steps = read_metrics(out)
    assert [s["step"] for s in steps] == [1, 2]
    assert COMMON | {"actor/kl_loss", "timing_s/ref"} <= steps[0].keys()
    assert steps[0]["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-6)  # one mini-batch: its update starts at ratio 1
    assert steps[0]["rollout/logprob_mult_error"] <= 1.001
    assert "step 2/2" in proc.stdout
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert list((out / "wandb").glob("offline-run-*"))


def test_ppo_with_a_critic_under_ray(setup, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "megarl.train", *overrides(setup, out)], cwd=REPO_ROOT, env=ENV,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    steps = read_metrics(out)
    assert [s["step"] for s in steps] == [1, 2]
    assert COMMON | {"critic/vf_loss", "critic/vf_clipfrac", "critic/values/mean", "timing_s/values",
                     "timing_s/update_critic"} <= steps[0].keys()
