"""Side by side with verl (issue #47): verl's own PPO trainer (`python -m verl.trainer.main_ppo`, FSDP actor and critic,
SGLang rollout) and megarl's (benchmarks/rl_step.py) on one GPU machine, one after the other, on the same
random-weight checkpoint (`megarl init-model` of --shape) and the same GSM8K parquet, with the batch, lengths, token
budgets, learning rates, estimator, KL and engine memory share of --recipe; every response runs to its full length on
both sides (verl: SGLang's server-wide `ignore_eos`; megarl: `rollout.ignore_eos`; the row keeps both sides' mean
response lengths). Appends one row (`what: peer`) to --out: per side the median step time over the steps after the
first, tokens/s/GPU, the phases under verl's metric names (megarl logs the same), the device-wide peak memory (NVML)
and megarl's step over verl's.

verl is staged, not installed, by this script: `bash benchmarks/peer/stage_verl.sh` here, then on the GPU machine
`bash benchmarks/peer/install_verl.sh` writes /tmp/verlsite/env.sh (verl's pins in a site of their own):

    python benchmarks/peer_verl.py run --recipe recipes/qwen2_5_0_5b_ppo_gsm8k.yaml --shape qwen2.5-0.5b --steps 6 \\
        --data data/gsm8k --verl-env /tmp/verlsite/env.sh --out $OUT/peer.json
    python benchmarks/peer_verl.py report --recipe ... --verl-log verl.log --verl-memory verl_mem.txt \\
        --megarl-row rl_step.json --out peer.json      # the row from logs a machine wrote (`run` keeps them)

verl runs without flash-attn (none builds on the machine): SDPA attention over padded batches
(`use_remove_padding=false`), which verl's own docs advise against for speed; its critic's loader hard-codes
flash-attention 2, which install_verl.sh edits to follow the config (the row says both).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from rl_step import ENGINE, model_path, prepare  # the engine settings megarl's side runs with

REPO = Path(__file__).resolve().parents[1]
PHASES = ("gen", "old_log_prob", "ref", "values", "update_critic", "update_actor", "update_weights", "step")
VERL_VERSION = "verl 0.9.1 (FSDP backend, SGLang rollout through its HTTP server)"
VERL_DIFFERENCES = [
    "verl: SDPA attention over padded batches (use_remove_padding=false): no flash-attn on the machine",
    "verl: the critic's loader edited to take the config's attn_implementation (it hard-codes flash-attention 2)",
    "verl: SGLang 0.5.16 and transformers 5.12.1 (verl 0.9.1 pins 0.5.12 and < 5.11)",
    "verl: gradient checkpointing off on both models, as megarl's recipe (verl's default is on)",
]


def verl_overrides(cfg, model: Path, data: Path, steps: int) -> list[str]:
    """verl's keys for megarl's config `cfg` (the recipe as loaded), on one node, without validation or checkpoints."""
    actor, critic, rollout = cfg.actor, cfg.critic, cfg.rollout
    kl = cfg.algorithm.kl_ctrl.kl_coef if cfg.algorithm.use_kl_in_reward else 0.0
    sampling = json.dumps({"ignore_eos": True})
    model_keys = [f"model.path={model}", "model.use_remove_padding=false", "model.enable_gradient_checkpointing=false"]
    sdpa = "model.override_config.attn_implementation=sdpa"  # a key verl's config lacks: hydra's `+` adds it
    return [
        f"algorithm.adv_estimator={cfg.algorithm.adv_estimator}", f"algorithm.gamma={cfg.algorithm.gamma}",
        f"algorithm.lam={cfg.algorithm.lam}", f"algorithm.use_kl_in_reward={str(cfg.algorithm.use_kl_in_reward).lower()}",
        f"algorithm.kl_ctrl.kl_coef={kl}",
        f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}",
        f"data.train_batch_size={cfg.data.train_batch_size}", f"data.max_prompt_length={cfg.data.max_prompt_length}",
        f"data.max_response_length={cfg.data.max_response_length}", "data.filter_overlong_prompts=true",
        *[f"actor_rollout_ref.{key}" for key in model_keys], f"+actor_rollout_ref.{sdpa}",
        f"actor_rollout_ref.actor.optim.lr={actor.optim.lr}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={actor.ppo_mini_batch_size}",
        f"actor_rollout_ref.actor.use_dynamic_bsz={str(actor.use_dynamic_bsz).lower()}",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={actor.ppo_max_token_len_per_gpu}",
        f"actor_rollout_ref.actor.use_kl_loss={str(actor.use_kl_loss).lower()}",
        "actor_rollout_ref.ref.fsdp_config.param_offload=false",
        f"actor_rollout_ref.rollout.name={rollout.name}", f"actor_rollout_ref.rollout.n={rollout.n}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={rollout.tensor_model_parallel_size}",
        f"actor_rollout_ref.rollout.gpu_memory_utilization={rollout.gpu_memory_utilization}",
        f"actor_rollout_ref.rollout.calculate_log_probs={str(rollout.calculate_log_probs).lower()}",
        *[f"+actor_rollout_ref.rollout.engine_kwargs.sglang.{k}={v}" for k, v in ENGINE.items()],
        f"+actor_rollout_ref.rollout.engine_kwargs.sglang.preferred_sampling_params='{sampling}'",
        *[f"critic.{key}" for key in model_keys], f"+critic.{sdpa}", f"critic.optim.lr={critic.optim.lr}",
        f"critic.ppo_max_token_len_per_gpu={critic.ppo_max_token_len_per_gpu}",
        f"critic.forward_max_token_len_per_gpu={critic.forward_max_token_len_per_gpu}",
        "trainer.logger=[console]", f"trainer.n_gpus_per_node={cfg.trainer.n_gpus_per_node}", "trainer.nnodes=1",
        "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.resume_mode=disable",
        f"trainer.total_training_steps={steps}", "trainer.total_epochs=1", "trainer.project_name=peer_verl",
    ]


ANSI = re.compile(r"\x1b\[[0-9;]*m")
STEP = re.compile(r"\bstep:(\d+) - (.*)$")


def verl_steps(log: str) -> list[dict]:
    """verl's console metrics, one dict per step (`step:N - key:value - ...`, Ray's prefixes and colours dropped)."""
    steps = []
    for line in ANSI.sub("", log).splitlines():
        found = STEP.search(line)
        if not found:
            continue
        metrics = {"step": int(found.group(1))}
        for item in found.group(2).split(" - "):
            key, _, value = item.rpartition(":")
            try:
                metrics[key.strip()] = float(value)
            except ValueError:
                continue
        steps.append(metrics)
    return steps


def verl_side(steps: list[dict], peak_gb: float) -> dict:
    """Medians over the steps after the first (which compiles and warms up), and each measured step's values."""
    later = steps[1:]
    if not later:
        raise SystemExit(f"verl logged {len(steps)} step(s): at least two are needed (the first is left out)")
    timings = {p: [s[f"timing_s/{p}"] for s in later] for p in PHASES if f"timing_s/{p}" in later[0]}
    phases = {p: statistics.median(values) for p, values in timings.items()}
    return {"step_s_median": phases.pop("step"), "phases_s": phases,
            "tokens_per_s_per_gpu": statistics.median(s["perf/throughput"] for s in later),
            "response_length_mean": statistics.median(s["response_length/mean"] for s in later),
            "device_peak_gb": peak_gb, "steps_measured": len(later),
            "per_step": {"step": [s["step"] for s in later], "timing_s": timings}}


def megarl_side(row: dict) -> dict:
    """The same figures from benchmarks/rl_step.py's row (megarl logs verl's `timing_s/*` names)."""
    per_step = row["per_step"]["timing_s"]
    responses = row["batch"] * row["n"]  # the row's generation rate is the mean response length × responses / gen
    lengths = [rate * gen / responses for rate, gen in zip(row["per_step"]["gen_tokens_per_s"], per_step["gen"])]
    return {"step_s_median": row["step_s_median"],
            "phases_s": {p: statistics.median(per_step[p]) for p in PHASES if p in per_step and p != "step"},
            "tokens_per_s_per_gpu": row["tokens_per_s_per_gpu"], "response_length_mean": statistics.median(lengths),
            "device_peak_gb": max(row["device_peak_gb"].values()), "steps_measured": row["steps_measured"],
            "per_step": row["per_step"]}


def peer_row(args, verl: dict, megarl: dict, overrides: list[str], megarl_commit: str, layers: str) -> dict:
    """`layers`: megarl's model path (megatron-core's local layers or Transformer Engine's)."""
    slower = sorted(p for p, s in megarl["phases_s"].items() if p in verl["phases_s"] and s > verl["phases_s"][p])
    return {"date": datetime.date.today().isoformat(), "commit": megarl_commit,
            "machine": os.environ.get("MEGARL_MACHINE", "unknown"), "what": "peer",
            "command": "python benchmarks/peer_verl.py " + " ".join(sys.argv[1:]), "recipe": str(args.recipe),
            "model_shape": args.shape, "dtype": "bf16", "peer": VERL_VERSION, "megarl": megarl, "verl": verl,
            "model_path": {"megarl": layers, "verl": "HF transformers under FSDP, SDPA attention"},
            "step_ratio_megarl_over_verl": megarl["step_s_median"] / verl["step_s_median"],
            "megarl_slower_phases": slower, "verl_overrides": overrides, "differences": VERL_DIFFERENCES}


class DevicePeak:
    """The device-wide used memory's peak over GPU 0..n-1 (NVML: every process, the engines included), sampled.
    Not parallel/memory.py's sampler: its reader is torch's, which would give this process a CUDA context of its own
    on each GPU, counted in the peak it measures."""

    def __init__(self, gpus: int, every_s: float = 0.2):
        import pynvml

        pynvml.nvmlInit()
        self.nvml, self.every_s, self.peak, self.done = pynvml, every_s, 0, threading.Event()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(gpus)]
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self.done.is_set():
            used = max(self.nvml.nvmlDeviceGetMemoryInfo(h).used for h in self.handles)
            self.peak = max(self.peak, used)
            time.sleep(self.every_s)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.done.set()
        self.thread.join()

    @property
    def peak_gb(self) -> float:
        return self.peak / 1e9


def run_verl(args, overrides: list[str], log: Path, gpus: int) -> float:
    """verl's trainer in its own site (`--verl-env`), its console to `log`; the device-wide peak (GB)."""
    command = ["bash", "-c", '. "$0" && exec python3 -m verl.trainer.main_ppo "$@"', str(args.verl_env), *overrides]
    with DevicePeak(gpus) as peak, log.open("w") as out:
        try:
            code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, timeout=args.time_limit).returncode
        except subprocess.TimeoutExpired:
            code = f"stopped at --time-limit {args.time_limit:.0f} s: its start-up alone took ~200 s on an H200"
    steps = verl_steps(log.read_text())
    if len(steps) < args.steps:  # verl may fail at its shutdown, after the last step's metrics
        raise SystemExit(f"verl ran {len(steps)} of {args.steps} steps (exit {code}); see {log}")
    return peak.peak_gb


def run_megarl(args, row_file: Path) -> dict:
    """benchmarks/rl_step.py on the same checkpoint and data (its --work), without its baselines; its row."""
    command = [sys.executable, str(REPO / "benchmarks/rl_step.py"), "--recipe", str(args.recipe), "--shape",
               args.shape, "--steps", str(args.steps + 1), "--data", str(args.data), "--work", str(args.work),
               "--no-baselines", "--set", "rollout.ignore_eos=true", "--out", str(row_file)]
    subprocess.run(command, check=True, timeout=args.time_limit)
    return json.loads(row_file.read_text())[-1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("run", "report"), help="run both sides here, or report from their logs")
    parser.add_argument("--recipe", type=Path, default=REPO / "recipes/qwen2_5_0_5b_ppo_gsm8k.yaml")
    parser.add_argument("--shape", default="qwen2.5-0.5b", help="a megarl.models.shapes.SHAPES name")
    parser.add_argument("--steps", type=int, default=6, help="verl's steps; megarl runs one more (rl_step drops one)")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared/data/gsm8k", help="GSM8K's raw files")
    parser.add_argument("--work", type=Path, default=Path("/tmp/peer"), help="the checkpoint, the parquet, the logs")
    parser.add_argument("--verl-env", type=Path, default=Path("/tmp/verlsite/env.sh"))
    parser.add_argument("--time-limit", type=float, default=900, help="seconds for each side")
    parser.add_argument("--verl-log", type=Path, help="report: verl's console log")
    parser.add_argument("--verl-memory", type=Path, help="report: nvidia-smi memory.used samples (MiB) of verl's run")
    parser.add_argument("--megarl-row", type=Path, help="report: benchmarks/rl_step.py's row of megarl's run")
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    from rl_memory import append_row

    from megarl.config import load_config

    cfg = load_config(args.recipe, [])
    # where rl_step.prepare puts them, on the machine that ran
    overrides = verl_overrides(cfg, args.work / args.shape, args.work / "gsm8k", args.steps)
    if args.mode == "run":
        args.work.mkdir(parents=True, exist_ok=True)
        prepare(args, args.work)
        peak_gb = run_verl(args, overrides, args.work / "verl.log", cfg.trainer.n_gpus_per_node)
        verl = verl_side(verl_steps((args.work / "verl.log").read_text()), peak_gb)
        megarl_row = run_megarl(args, args.work / "megarl_rl_step.json")
    else:
        samples = [float(v) for v in args.verl_memory.read_text().split()]
        verl = verl_side(verl_steps(args.verl_log.read_text()), max(samples) * 2**20 / 1e9)
        megarl_row = json.loads(args.megarl_row.read_text())[-1]
    row = peer_row(args, verl, megarl_side(megarl_row), overrides, megarl_row["commit"], model_path(cfg))
    if args.mode == "report":
        row["from_logs"] = {"verl_log": str(args.verl_log), "verl_memory": str(args.verl_memory),
                            "megarl_row": megarl_row["command"]}
    return append_row(args.out, row, 0, "")


if __name__ == "__main__":
    sys.exit(main())
