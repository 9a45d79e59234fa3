"""The reward-model pass inside a PPO step: `recipes/qwen2_5_0_5b_ppo_gsm8k.yaml` (random weights of the
Qwen2.5-0.5B shape, responses to full length) with a reward model of the same shape (`reward.model.path`), under
torchrun with SGLang. Reports the reward model's scoring throughput (prompt + response tokens per second) against
the actor's old-log-prob pass over the same sequences in the same step (the same trunk's forward: the baseline),
its share of the step, and the device-wide peak (nvidia-smi, every process). Appends one row to --out.

    python benchmarks/reward_model_step.py --steps 4 --time-limit 400 --out $OUT/reward-model.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

from recipe_process import run_logged
from rl_memory import ENGINE, DeviceSampler, append_row

REPO = Path(__file__).resolve().parents[1]
SHAPE = "qwen2.5-0.5b"


def prepare(work: Path, data_dir: Path) -> tuple[Path, Path, Path]:
    """The policy (random weights), a reward model on the same trunk with a random one-label head, GSM8K."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from megarl.data.preprocess import preprocess
    from megarl.models.init_model import write_model

    policy, reward_model = work / SHAPE, work / f"{SHAPE}-rm"
    if not (policy / "config.json").exists():
        write_model(SHAPE, policy, dtype=torch.bfloat16)
    if not (reward_model / "config.json").exists():
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_pretrained(policy, num_labels=1, torch_dtype=torch.bfloat16)
        model.save_pretrained(reward_model)
        AutoTokenizer.from_pretrained(policy).save_pretrained(reward_model)
    if not (work / "gsm8k/train.parquet").exists():
        preprocess("gsm8k", str(data_dir), work / "gsm8k")
    return policy, reward_model, work / "gsm8k/train.parquet"


def run(args, policy: Path, reward_model: Path, train: Path, out_dir: Path) -> tuple[int | str, str, dict]:
    overrides = [f"model.path={policy}", f"reward.model.path={reward_model}", f"data.train_files=[{train}]",
                 "data.val_files=[]", f"trainer.total_training_steps={args.steps}", "trainer.save_freq=-1",
                 "trainer.test_freq=-1", "trainer.val_before_train=false", f"trainer.output_dir={out_dir}",
                 "trainer.log_samples=0", *ENGINE]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "-m", "megarl.train",
           "--recipe", str(REPO / "recipes/qwen2_5_0_5b_ppo_gsm8k.yaml"), *overrides]
    sampler = DeviceSampler()
    sampler.start()
    try:
        code, tail = run_logged(cmd, out_dir, args.time_limit)
    finally:
        sampler.stopped.set()
        sampler.join()
    return code, tail, {"overrides": overrides, "peaks": sampler.peaks}


def summarise(metrics: list[dict]) -> dict:
    """Medians over the steps after the first (which compiles and warms the engine)."""
    steps = [m for m in metrics if m.get("step", 0) > 1] or [m for m in metrics if m.get("step", 0) > 0]

    def median(key):
        values = [m[key] for m in steps if key in m]
        return statistics.median(values) if values else None

    tokens, rm_s, logprob_s = median("perf/total_num_tokens"), median("timing_s/reward_model"), median(
        "timing_s/old_log_prob")
    return {"steps_measured": len(steps), "step_s": median("timing_s/step"), "reward_model_s": rm_s,
            "old_log_prob_s": logprob_s, "tokens_per_step": tokens,
            "reward_model_tokens_per_s": tokens / rm_s if tokens and rm_s else None,
            "baseline": {"what": "the actor's old-log-prob pass over the same sequences, same step",
                         "tokens_per_s": tokens / logprob_s if tokens and logprob_s else None,
                         "reward_model_time_ratio": rm_s / logprob_s if rm_s and logprob_s else None},
            "reward_model_share_of_step": rm_s / median("timing_s/step") if rm_s else None,
            "memory_reward_model_peak_gb": median("memory/reward_model/peak_gb"),
            "model_score_mean": [m.get("reward/model_score/mean") for m in steps]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--work", type=Path, default=Path("/tmp/reward_model_step"))
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared/data/gsm8k")
    parser.add_argument("--time-limit", type=float, help="stop the run after this many seconds (its steps count)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    policy, reward_model, train = prepare(args.work, args.data)
    out_dir = args.work / f"run-{int(time.time())}"
    code, tail, extra = run(args, policy, reward_model, train, out_dir)
    metrics_file = out_dir / "metrics.jsonl"
    metrics = [json.loads(line) for line in metrics_file.read_text().splitlines()] if metrics_file.exists() else []
    row = {"date": datetime.date.today().isoformat(), "commit": os.environ.get("MEGARL_COMMIT", "unknown"),
           "machine": os.environ.get("MEGARL_MACHINE", "unknown"), "what": "reward-model",
           "command": "python benchmarks/reward_model_step.py " + " ".join(sys.argv[1:]), "model_shape": SHAPE,
           "reward_model_shape": SHAPE, "dtype": "bf16", "tp": 1, "rollout_tp": 1, "batch": 64, "n": 1,
           "prompt_len": 512, "response_len": 512, "backend": "sglang", "exit_code": code,
           "device_peak_gb": max(extra["peaks"].values()) if extra["peaks"] else None, **summarise(metrics)}
    return append_row(args.out, row, code, tail)


if __name__ == "__main__":
    sys.exit(main())
