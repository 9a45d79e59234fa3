"""GPU (one H200, SGLang rollout): the tiny recipe learns as on CPU, and the Qwen2.5-0.5B PPO recipe runs 3 steps
on a random-weight 0.5B model with every metric issue #6 names. Both run under torchrun (no Ray staging needed).

Rows for benchmarks/results/ go to $MEGARL_RESULTS_DIR/recipes_gpu.json when it is set."""

import json
import subprocess
import sys
import time

import pytest
import torch
import yaml

from megarl.config.loader import RESOLVED_CONFIG_NAME
from megarl.models.accelerators import layers_name
from tests.helpers import (GPU0_ENV, ON_TRANSFORMER_ENGINE, REPO_ROOT, SGLANG, SHARED_DATA, launch_workdir,
                           record_gpu_row)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA and SGLang (the device machines)")

METRICS = {f"actor/{k}" for k in ("entropy", "pg_loss", "pg_clipfrac", "ppo_kl", "grad_norm", "lr")} | {
    f"critic/{k}" for k in ("vf_loss", "vpred_mean", "score/mean", "rewards/mean", "advantages/mean", "returns/mean")
} | {f"timing_s/{k}" for k in ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic",
                                  "update_actor", "update_weights", "step")} | {
    "response_length/mean", "perf/throughput", "perf/mfu/actor", "perf/max_memory_allocated_gb",
    "rollout/logprob_mult_error"}


def one_gpu_grpo_command(tmp_path, out, *overrides: str) -> list[str]:
    """`megarl train` under torchrun on one GPU with SGLang: the Qwen3-0.6B GRPO recipe on a random-weight Qwen2.5-0.5B
    and GSM8K prompts (batch 16, micro-batches of 8), `overrides` last."""
    from megarl.data.preprocess import preprocess
    from megarl.models.init_model import write_model

    model = write_model("qwen2.5-0.5b", tmp_path / "model", dtype=torch.bfloat16)
    data = preprocess("gsm8k", str(SHARED_DATA / "gsm8k"), tmp_path / "gsm8k")
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "-m", "megarl.train",
            "--recipe", str(REPO_ROOT / "recipes/qwen3_0_6b_grpo_gsm8k.yaml"), f"model.path={model}",
            f"data.train_files=[{data['train']}]", "data.val_files=[]", "data.train_batch_size=16",
            "actor.ppo_mini_batch_size=16", "actor.ppo_micro_batch_size_per_gpu=8", "actor.use_dynamic_bsz=false",
            "actor.megatron.tensor_model_parallel_size=1", "rollout.tensor_model_parallel_size=1",
            "trainer.n_gpus_per_node=1", "trainer.val_before_train=false", f"trainer.output_dir={out}", *SGLANG,
            *overrides]


def wait_for_step_one(proc: subprocess.Popen, metrics, timeout_s: float = 600) -> None:
    """Until the run at `proc` has logged its first step to `metrics`; fails if it ends or stalls first."""
    deadline = time.monotonic() + timeout_s
    while not (metrics.exists() and metrics.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended or stalled before step 1"
        time.sleep(0.5)


def read_metrics(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def record(row, name: str = "recipes_gpu.json"):
    record_gpu_row(name, {"dtype": "bf16", "backend": "sglang", **row})


TE = "transformer_impl=transformer_engine"
# lora: SGLang serves the merged adapters each step; async: one SGLang request per response, scored as it finishes;
# tools: the agent loop's trajectories through SGLang's async API, the python tool in the sandbox; -te: every
# megatron model (actor and reference; rlhf's reward model in its training, then as critic and reward) on
# Transformer Engine's layers
TINY_RUNS = {"grpo": ("grpo", ()), "lora": ("lora", ()), "grpo-async": ("grpo", ("rollout.mode=async",)),
             "tools": ("tools", ()), "tools-async": ("tools", ("rollout.mode=async",)),
             "grpo-te": ("grpo", (f"actor.megatron.{TE}",)),
             "rlhf-te": ("rlhf", (f"actor.megatron.{TE}", f"critic.megatron.{TE}", f"reward.model.megatron.{TE}"))}


@pytest.mark.parametrize("run", [pytest.param(run, marks=[ON_TRANSFORMER_ENGINE] if run.endswith("-te") else [])
                                 for run in sorted(TINY_RUNS)])
def test_tiny_recipe_learns_on_one_gpu(tmp_path, run):
    recipe, extra = TINY_RUNS[run]
    on_te = run.endswith("-te")
    launch_workdir(tmp_path)
    stage_env = {"RM_OVERRIDES": f"critic.megatron.{TE}"} if on_te else {}
    proc = subprocess.run(["bash", "launch/tiny_cpu.sh", recipe, *SGLANG, *extra], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900,
                          env={**GPU0_ENV, "LAUNCHER": "torchrun", "NPROC": "1", **stage_env})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    rows = read_metrics(tmp_path / f"outputs/tiny_cpu/{recipe}/metrics.jsonl")
    steps = [r for r in rows if r["step"] > 0]
    # rlhf's reward is the reward model's alone: the rule's score says whether the policy learned the task
    scores = [s["reward/rule_score/mean" if recipe == "rlhf" else "critic/score/mean"] for s in steps]
    validation = {r["step"]: r[k] for r in rows for k in r if k.startswith("val-core/")}
    record({"what": f"tiny-{run}-recipe", "command": "MEGARL_RESULTS_DIR=$OUT python -m pytest "
            f"tests/gpu/test_recipes_gpu.py -k 'tiny and {run}'", "model_shape": "tiny", "scores": scores,
            "validation": validation, "step_s_median": sorted(s["timing_s/step"] for s in steps)[len(steps) // 2],
            "logprob_mult_error_max": max(s["rollout/logprob_mult_error"] for s in steps),
            **({"tool_calls_per_sample": [s["tool/calls_per_sample"] for s in steps],
                "tools_s_median": sorted(s["timing_s/tools"] for s in steps)[len(steps) // 2]}
               if recipe == "tools" else {}),
            "model_path": layers_name("transformer_engine" if on_te else "local"),
            **({"rm_val_accuracy": rm_accuracy(tmp_path)} if recipe == "rlhf" else {})})
    assert scores[0] <= 0.4 and sum(scores[-3:]) / 3 >= 0.8, scores
    assert validation[0] <= 0.4 and validation[max(validation)] >= 0.8, validation
    if recipe == "rlhf":
        assert rm_accuracy(tmp_path)[-1] >= 0.9
    if run == "rlhf-te":  # RM_OVERRIDES reached the reward model's training
        rm_config = yaml.safe_load((tmp_path / "outputs/tiny_cpu/rm" / RESOLVED_CONFIG_NAME).read_text())
        assert rm_config["critic"]["megatron"]["transformer_impl"] == "transformer_engine"


def rm_accuracy(workdir) -> list[float]:
    """The reward model's pairwise accuracy on held-out rankings, per validation of its training."""
    rows = map(json.loads, (workdir / "outputs/tiny_cpu/rm/metrics.jsonl").read_text().splitlines())
    return [row["val/rm/accuracy"] for row in rows if "val/rm/accuracy" in row]


def test_qwen2_5_0_5b_ppo_three_steps(tmp_path):
    from megarl.data.preprocess import preprocess
    from megarl.models.init_model import write_model

    model = write_model("qwen2.5-0.5b", tmp_path / "model", dtype=torch.bfloat16)
    data = preprocess("gsm8k", str(SHARED_DATA / "gsm8k"), tmp_path / "gsm8k")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "-m", "megarl.train",
           "--recipe", str(REPO_ROOT / "recipes/qwen2_5_0_5b_ppo_gsm8k.yaml"), f"model.path={model}",
           f"data.train_files=[{data['train']}]", f"data.val_files=[{data['test']}]", "data.val_batch_size=256",
           "trainer.total_training_steps=3", "trainer.test_freq=3", "trainer.val_before_train=false",
           f"trainer.output_dir={out}", *SGLANG]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, env=GPU0_ENV)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    steps = read_metrics(out / "metrics.jsonl")
    record({"what": "qwen2.5-0.5b-ppo-recipe", "command": "MEGARL_RESULTS_DIR=$OUT python -m pytest "
            "tests/gpu/test_recipes_gpu.py -k qwen2_5", "model_shape": "qwen2.5-0.5b", "random_init": True,
            "steps": steps})
    assert [s["step"] for s in steps] == [1, 2, 3]
    for step in steps:
        assert METRICS <= step.keys(), sorted(METRICS - step.keys())
    assert any(k.startswith("val-core/openai/gsm8k/reward/mean@") for k in steps[-1])
