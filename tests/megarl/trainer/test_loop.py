"""`megarl train` end to end on CPU: a tiny model with a real tokenizer, GSM8K-format parquet, transformers
rollout engines; GRPO with a KL loss under torchrun (TP=2) and PPO with a critic under Ray run their steps and
write every step's metrics to metrics.jsonl, memory peaks included."""

import html
import json
import re
import sys

import pytest

from megarl.trainer.perf import memory_metrics
from parallel.topology import free_port
from tests.helpers import CHROMIUM, chromium, make_reward_model, overrides, read_metrics, run_command

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
    ranks = [{"gen": {"device": 3 * gb, "host": 9 * gb, "reserved": gb, "allocated": gb // 2},
              "reward": {"device": 8 * gb, "host": 9 * gb, "reserved": gb, "allocated": gb},
              "update_weights": {"device": gb, "host": gb, "reserved": gb, "allocated": gb},
              "step": {"device": 8 * gb, "host": 5 * gb, "reserved": gb, "allocated": gb}},
             {"gen": {"device": 2 * gb, "host": gb, "reserved": 2 * gb, "allocated": gb},
              "reward": {"device": gb, "host": gb, "reserved": gb, "allocated": gb},
              "update_weights": {"device": 2 * gb, "host": gb, "reserved": gb, "allocated": gb // 4},
              "step": {"device": 2 * gb, "host": 7 * gb, "reserved": gb, "allocated": gb}}]
    assert memory_metrics(ranks) == {"memory/gen/peak_gb": 3.0, "memory/gen/reserved_gb": 2.0,
                                     "memory/gen/allocated_gb": 1.0, "memory/sync/peak_gb": 2.0,
                                     "memory/sync/reserved_gb": 1.0, "memory/sync/allocated_gb": 1.0,
                                     "memory/host/peak_gb": 7.0}
    without_gpus = [{window: {"device": None, "host": gb, "reserved": None, "allocated": None}
                     for window in ("gen", "step")}]
    assert memory_metrics(without_gpus) == {"memory/host/peak_gb": 1.0}


def test_a_colocated_sync_peaks_when_the_kv_cache_resumes():
    # The colocated hand-over's `resume` window (weights back, then the KV cache after update_weights) holds the
    # sync's peak: the KV cache back beside the weights. memory/sync read update_weights alone since 0f7d2c3.
    gb = 10**9
    rank = {"update_weights": {"device": 20 * gb, "host": gb, "reserved": 5 * gb, "allocated": 5 * gb},
            "resume": {"device": 60 * gb, "host": gb, "reserved": 5 * gb, "allocated": 4 * gb},
            "step": {"device": 60 * gb, "host": gb, "reserved": 5 * gb, "allocated": 5 * gb}}
    metrics = memory_metrics([rank])
    assert (metrics["memory/sync/peak_gb"], metrics["memory/sync/allocated_gb"]) == (60.0, 5.0)


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
    # Rank 0 alone writes the sample logs; with a reference, its log-probs are in each record.
    records = read_samples(out / "samples" / "train" / "2.jsonl")
    assert len(records) == 4 and all(len(r["ref_log_prob"]) == r["response_length"] for r in records)
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert list((out / "wandb").glob("offline-run-*"))


def read_samples(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_ppo_with_a_critic_under_ray(setup, tmp_path):
    out = tmp_path / "run"
    proc = run_command([sys.executable, "-m", "megarl.train",
                        *overrides(setup, out, f"data.val_files=[{setup / 'train.parquet'}]", "trainer.log_samples=3")],
                       timeout=480)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    steps = read_metrics(out)
    assert [s["step"] for s in steps] == [0, 1, 2]
    steps = steps[1:]
    # The sample logs: 3 of each step's 4 samples with the PPO iteration's per-token columns, and the step's
    # metrics; the first 3 validation samples at each validation.
    for step in (1, 2):
        records = read_samples(out / "samples" / "train" / f"{step}.jsonl")
        assert [r["index"] for r in records] == [0, 1, 2] and {r["step"] for r in records} == {step}
        for record in records:
            assert record["gts"] in ("3", "7", "4", "6") and record["data_source"] == "openai/gsm8k"
            assert "What is" in record["input"] and len(record["tokens"]) == record["response_length"]
            for key in ("rollout_log_probs", "old_log_probs", "values", "advantages", "returns", "entropy"):
                assert len(record[key]) == record["response_length"], key
            assert all(e >= 0 for e in record["entropy"])
        logged = json.loads((out / "samples" / "train" / f"{step}.metrics.json").read_text())
        assert logged["critic/vf_loss"] == steps[step - 1]["critic/vf_loss"]
    for step in (0, 2):
        validation = read_samples(out / "samples" / "val" / f"{step}.jsonl")
        assert [r["index"] for r in validation] == [0, 1, 2] and validation[0]["gts"] == "3"
    assert COMMON | {"critic/vf_loss", "critic/vf_clipfrac", "critic/values/mean", "timing_s/values",
                     "timing_s/update_critic"} <= steps[0].keys()
    assert_cpu_memory_logged(steps)
    assert_the_viewer_shows(out, read_samples(out / "samples" / "train" / "2.jsonl")[1], tmp_path)


def assert_the_viewer_shows(out, record, tmp_path):
    """`megarl view` on the run's output, loaded in headless Chromium (where Debian's is installed, as in CI):
    plotly's curves and the chosen sample's stages render."""
    page = tmp_path / "view.html"
    assert run_command([sys.executable, "-m", "megarl.cli", "view", str(out), "--out", str(page)],
                       timeout=120).returncode == 0
    if CHROMIUM is None:
        return
    dom = chromium(tmp_path, page.as_uri() + "#step=2&sample=1", "--dump-dom").stdout
    assert dom.count('class="main-svg"') >= 5
    response = dom[dom.index('id="stage-response"'):dom.index('id="stage-reward"')]
    assert html.escape(record["output"][:3], quote=False) in response
    strip = re.search(r'id="strip-values">(.*?)</div>', dom).group(1)
    assert strip.count("<span title=") == record["response_length"]


def test_grpo_rewarded_by_a_reward_model_alone_on_gpus_of_its_own(setup, tmp_path):
    """reward.rule_weight=0: the reward model's scores are the rewards; the rules still grade (rule_score). The
    reward model runs in a pool of its own (one process beside the actor's one: a local Ray has the machine's two
    cores) and has a tokenizer of its own, so it scores each prompt + response re-encoded: its scores equal
    transformers' on the re-encoded text. The engine is asked for no log-probs (rollout.calculate_log_probs=false):
    the step trains without them, and neither the gate's metrics nor the samples' column appear."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    reward_model = make_reward_model(tmp_path / "rm", vocab_size=300)
    out = tmp_path / "run"
    proc = run_command([sys.executable, "-m", "megarl.train",
                        *overrides(setup, out, "algorithm.adv_estimator=grpo", f"reward.model.path={reward_model}",
                                   "reward.rule_weight=0", "reward.model.weight=2.0",
                                   "reward.model.enable_resource_pool=true", "reward.model.n_gpus_per_node=1",
                                   "trainer.n_gpus_per_node=1", "trainer.log_samples=-1",
                                   "rollout.calculate_log_probs=false", "rollout.max_logprob_mult_error=null")],
                       timeout=480)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    assert "pool main: 1 node × 1 GPUs, one process per GPU hosting actor, rollout" in proc.stdout
    assert "pool reward_model: 1 node × 1 GPUs, one process per GPU hosting reward_model" in proc.stdout
    assert "reward model: it reads text differently from the policy" in proc.stdout
    steps = read_metrics(out)
    without_gate = COMMON - {"rollout/logprob_mult_error"}
    assert without_gate | {"reward/model_score/mean", "reward/rule_score/mean", "timing_s/reward_model"} <= steps[0].keys()
    assert not [key for step in steps for key in step if key.startswith("rollout/logprob")]
    for step in steps:
        assert step["critic/score/mean"] == pytest.approx(2.0 * step["reward/model_score/mean"], abs=1e-5)
    records = read_samples(out / "samples" / "train" / "1.jsonl")
    assert all("rollout_log_probs" not in r and "old_log_probs" in r for r in records)
    assert all(r["score"] == pytest.approx(2.0 * r["rm_score"], abs=1e-5) for r in records)
    assert len({round(r["rm_score"], 5) for r in records}) > 1  # scored per response
    judge = AutoTokenizer.from_pretrained(reward_model)
    hf = AutoModelForSequenceClassification.from_pretrained(reward_model, torch_dtype=torch.float32).eval()
    for record in records:
        a, b = {"3": (1, 2), "7": (3, 4), "4": (2, 2), "6": (5, 1)}[record["gts"]]  # the setup's prompts
        prompt = judge.apply_chat_template([{"role": "user", "content": f"What is {a} + {b}? ####"}],
                                           add_generation_prompt=True, tokenize=False)
        ids = [*judge(prompt, add_special_tokens=False)["input_ids"],
               *judge(record["output"], add_special_tokens=False)["input_ids"],
               *[judge.eos_token_id] * (record["finish_reason"] == "stop")]
        with torch.no_grad():
            assert record["rm_score"] == pytest.approx(hf(torch.tensor([ids])).logits[0, 0].item(), abs=1e-4)
