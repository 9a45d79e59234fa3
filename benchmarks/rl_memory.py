"""RL steps of a recipe on random weights (responses to full length) under torchrun with SGLang, and the memory each
phase takes on the device: the run's own `memory/*/peak_gb` metrics (device-wide) and, as a cross-check,
`nvidia-smi --query-gpu=memory.used` sampled every 0.2 s over the whole run. Appends one row per run (`what: memory`)
to --out, then `megarl plan`'s prediction for the same config beside it (`what: plan`, benchmarks/plan_rows.py).

    python benchmarks/rl_memory.py --layers 12 --tp 1 --label no-offload --out $OUT/memory.json
    python benchmarks/rl_memory.py --layers 12 --tp 1 --offload optimizer --out $OUT/memory.json
    python benchmarks/rl_memory.py --layers 12 --tp 1 --lora-rank 32 --out $OUT/memory.json   # LoRA
    python benchmarks/rl_memory.py --layers 18 --tp 2 --gpu-cap-gib 23.99 --reward decoded-length \
        --offload optimizer,grad --set actor.ppo_max_token_len_per_gpu=2560 --out $OUT/memory.json
    python benchmarks/rl_memory.py --recipe recipes/qwen3_0_6b_grpo_gsm8k.yaml --shape qwen3-0.6b --steps 3 ...

With its default recipe (recipes/qwen3_8b_grpo_gsm8k_4gpu.yaml) the settings are seed 003's: GRPO, low_var_kl 0.001
as a loss, n 8, batch 8, 256 prompt / 1024 response tokens, full recompute, token budget 12288; another recipe runs
with its own settings (and --set). --gpu-cap-gib makes the GPUs a smaller card's size (benchmarks/gpu_cap.py); the
figures recorded are then the run's own, the ballast's memory subtracted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from gpu_cap import Ballast, hold_all_but
from recipe_process import output_dir, run_logged

from megarl.plan.machine import gpu_memory_gib, host_memory_gib

REPO = Path(__file__).resolve().parents[1]
SEED_003_RECIPE = "recipes/qwen3_8b_grpo_gsm8k_4gpu.yaml"
OFFLOAD_KEYS = ("optimizer", "param", "grad")


def offload_overrides(offload: str) -> list[str]:
    """--offload: none, all, or a comma-separated list of optimizer, param, grad (the others off)."""
    named = {"none": (), "all": OFFLOAD_KEYS}
    keys = named[offload] if offload in named else offload.split(",")
    unknown = set(keys) - set(OFFLOAD_KEYS)
    if unknown:
        raise SystemExit(f"--offload {offload}: {', '.join(sorted(unknown))} is none of {', '.join(OFFLOAD_KEYS)}")
    return [f"actor.megatron.{key}_offload={str(key in keys).lower()}" for key in OFFLOAD_KEYS]

ENGINE = ["rollout.engine_kwargs.attention_backend=triton", "rollout.engine_kwargs.sampling_backend=pytorch",
          "rollout.engine_kwargs.cuda_graph_max_bs_decode=64"]


class DeviceSampler(threading.Thread):
    """The largest `memory.used` nvidia-smi reports for each GPU while the run lasts (every process counted), and
    each process's largest share (which says how much is the engine's and how much the trainer's)."""

    def __init__(self, skip_pids: set[int] = frozenset()):
        super().__init__(daemon=True)
        self.skip_pids = {str(pid) for pid in skip_pids}
        self.peaks: dict[int, float] = {}
        self.process_peaks: dict[str, float] = {}
        self.stopped = threading.Event()

    def query(self, what: str) -> list[list[str]]:
        out = subprocess.run(["nvidia-smi", f"--query-{what}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True).stdout
        return [[x.strip() for x in line.split(",")] for line in out.strip().splitlines()]

    def run(self):
        while not self.stopped.is_set():
            for index, used_mib in self.query("gpu=index,memory.used"):
                self.peaks[int(index)] = max(self.peaks.get(int(index), 0.0), int(used_mib) * 2**20 / 1e9)
            for pid, name, used_mib in self.query("compute-apps=pid,process_name,used_memory"):
                if pid in self.skip_pids:
                    continue
                key = f"{pid} {name.rsplit('/', 1)[-1]}"
                self.process_peaks[key] = max(self.process_peaks.get(key, 0.0), int(used_mib) * 2**20 / 1e9)
            time.sleep(0.2)


def prepare(args, work: Path) -> tuple[Path, Path]:
    """The model (random weights drawn on the GPU, in a process of its own: this one must hold no CUDA memory while
    the run is measured) and the preprocessed data."""
    from megarl.data.preprocess import preprocess

    model = work / (f"{args.shape}-{args.layers}l" if args.layers else args.shape)
    if not (model / "config.json").exists():
        layers = ["--layers", str(args.layers)] if args.layers else []
        subprocess.run([sys.executable, "-m", "megarl.models.init_model", "--shape", args.shape, "--out", str(model),
                        "--dtype", "bfloat16", "--device", "cuda", *layers], check=True, cwd=REPO)
    if not (work / "gsm8k/train.parquet").exists():
        preprocess("gsm8k", str(args.data), work / "gsm8k")
    return model, work / "gsm8k/train.parquet"


def recipe_overrides(args, model: Path, train: Path, out_dir: Path) -> list[str]:
    """The recipe's settings, seed 003's for its own recipe (with --tp), and the benchmark's: no validation, no
    checkpoints, the engine's kernels that run on the device machine."""
    seed_003 = ["data.train_batch_size=8", "data.max_prompt_length=256", "data.max_response_length=1024",
                "actor.ppo_mini_batch_size=8", f"actor.megatron.tensor_model_parallel_size={args.tp}",
                f"rollout.tensor_model_parallel_size={args.tp}", f"trainer.n_gpus_per_node={args.gpus or args.tp}",
                f"rollout.gpu_memory_utilization={args.engine_share}", *offload_overrides(args.offload)]
    lora = [f"actor.lora.rank={args.lora_rank}", f"actor.lora.alpha={2 * args.lora_rank}"] if args.lora_rank else []
    reward = [f"reward.function={REPO / 'benchmarks/decoded_length_reward.py'}:compute_score"] \
        if args.reward == "decoded-length" else []
    return [f"model.path={model}", f"data.train_files=[{train}]", "data.val_files=[]",
            *(seed_003 if args.recipe == SEED_003_RECIPE else []), f"trainer.total_training_steps={args.steps}",
            "trainer.save_freq=-1", "trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.log_samples=0",
            f"trainer.output_dir={out_dir}", *ENGINE, *lora, *reward, *args.set]


def run(args, gpus: int, overrides: list[str], ballast: Ballast | None) -> tuple[int | str, str, dict]:
    """The run under torchrun, stopped after --time-limit seconds (exit code "timeout": the steps it finished count)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(gpus), "-m", "megarl.train",
           "--recipe", str(REPO / args.recipe), *overrides]
    sampler = DeviceSampler(ballast.pids if ballast else set())
    sampler.start()
    env = {"PYTORCH_CUDA_ALLOC_CONF": args.alloc_conf} if args.alloc_conf else {}
    code, tail = run_logged(cmd, output_dir(overrides), args.time_limit, env)
    sampler.stopped.set()
    sampler.join()
    return code, tail, {"peaks": sampler.peaks, "process_peaks": sampler.process_peaks}


def summarise(metrics: list[dict], ballast_gb: float) -> dict:
    """Per phase the largest device-wide peak over the steps, less the ballast's memory; the median of each timing
    and of tokens/s; each step's health figures."""
    steps = [m for m in metrics if m.get("step", 0) > 0]
    keys = sorted({k for m in steps for k in m if k.startswith("memory/")})  # peaks and reservations (GB)
    device = {k for k in keys if k.endswith("/peak_gb") and not k.startswith("memory/host/")}
    timing = sorted({k for m in steps for k in m if k.startswith("timing_s/")})

    def median(key):
        values = [m[key] for m in steps if key in m]
        return statistics.median(values) if values else None

    return {"steps_done": len(steps),
            "memory_gb": {k: max(m.get(k, 0.0) for m in steps) - (ballast_gb if k in device else 0.0) for k in keys},
            "timing_s_median": {k: median(k) for k in timing}, "tokens_per_s_per_gpu": median("perf/throughput"),
            "step_s": median("timing_s/step"), "score_mean": [m.get("critic/score/mean") for m in steps],
            "actor_grad_norm": [m.get("actor/grad_norm") for m in steps],
            "kl_loss": [m.get("actor/kl_loss") for m in steps],
            "entropy": [m.get("actor/entropy") for m in steps],
            "response_length_mean": [m.get("response_length/mean") for m in steps],
            "logprob_mult_error": [m.get("rollout/logprob_mult_error") for m in steps]}


def append_row(out: Path, row: dict, code: int, tail: str) -> int:
    """Append `row` to the JSON list in `out` (with the run's output tail when it failed), print it; `code`."""
    if code != 0:
        row["error_tail"] = tail
    rows = json.loads(out.read_text()) if out.exists() else []
    out.write_text(json.dumps(rows + [row], indent=1))
    print(json.dumps({k: v for k, v in row.items() if k != "error_tail"}, indent=1))
    if code != 0:
        print(tail[-6000:])
    return code


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """This script's options (`argv`: a recorded row's, for benchmarks/plan_check.py)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default=SEED_003_RECIPE, help="seed 003's settings apply to its own recipe only")
    parser.add_argument("--shape", default="qwen3-8b", help="megarl.models.shapes name of the random-weight model")
    parser.add_argument("--layers", type=int, help="fewer layers than the shape has")
    parser.add_argument("--tp", type=int, default=1, help="seed 003: actor and rollout tensor parallelism")
    parser.add_argument("--gpus", type=int, help="seed 003: GPUs (default: --tp)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--offload", default="none",
                        help="seed 003: the actor's offloads: none, all, or e.g. optimizer,grad")
    parser.add_argument("--engine-share", type=float, default=0.5, help="seed 003: rollout.gpu_memory_utilization")
    parser.add_argument("--lora-rank", type=int, default=0, help="actor.lora.rank (0: full fine-tuning)")
    parser.add_argument("--reward", choices=("rule", "decoded-length"), default="rule",
                        help="decoded-length: benchmarks/decoded_length_reward.py, so that gradients are not zero")
    parser.add_argument("--gpu-cap-gib", type=float, help="leave only this much memory free on each GPU "
                        "(benchmarks/gpu_cap.py): the run sees a card of this size")
    parser.add_argument("--time-limit", type=float, help="stop the run after this many seconds (its steps count)")
    parser.add_argument("--set", nargs="*", default=[], help="more recipe overrides")
    parser.add_argument("--label", default="")
    parser.add_argument("--alloc-conf", default=None, help="PYTORCH_CUDA_ALLOC_CONF for the run's processes")
    parser.add_argument("--work", type=Path, default=Path("/tmp/rl_memory"))
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared/data/gsm8k")
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args(argv)


def main() -> int:
    from megarl.config import load_config
    from plan_rows import plan_row

    args = parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    model, train = prepare(args, args.work)
    out_dir = args.work / f"run-{args.label or args.offload}-{int(time.time())}"
    overrides = recipe_overrides(args, model, train, out_dir)
    cfg = load_config(str(REPO / args.recipe), overrides)
    gpus = cfg.trainer.n_gpus_per_node
    ballast = hold_all_but(round(args.gpu_cap_gib * 2**30), gpus) if args.gpu_cap_gib else None
    try:
        code, tail, extra = run(args, gpus, overrides, ballast)
    finally:
        if ballast:
            ballast.release()
    ballast_gb = {i: ballast.bytes[i] / 1e9 if ballast else 0.0 for i in range(gpus)}
    metrics_file = out_dir / "metrics.jsonl"
    metrics = [json.loads(line) for line in metrics_file.read_text().splitlines()] if metrics_file.exists() else []
    peaks = {i: peak - ballast_gb[i] for i, peak in extra["peaks"].items() if i < gpus}
    row = {"date": datetime.date.today().isoformat(), "commit": os.environ.get("MEGARL_COMMIT", "unknown"),
           "machine": os.environ.get("MEGARL_MACHINE", "unknown"), "what": "memory", "label": args.label,
           "command": "python benchmarks/rl_memory.py " + " ".join(sys.argv[1:]), "recipe": args.recipe,
           "model_shape": args.shape, "layers": args.layers, "dtype": "bf16",
           "tp": cfg.actor.megatron.tensor_model_parallel_size, "rollout_tp": cfg.rollout.tensor_model_parallel_size,
           "gpus_used": gpus, "offload": {k: getattr(cfg.actor.megatron, f"{k}_offload") for k in OFFLOAD_KEYS},
           "lora_rank": args.lora_rank, "engine_share": cfg.rollout.gpu_memory_utilization,
           "alloc_conf": args.alloc_conf, "n": cfg.rollout.n, "batch": cfg.data.train_batch_size,
           "prompt_len": cfg.data.max_prompt_length, "response_len": cfg.data.max_response_length,
           "reward": args.reward, "backend": cfg.rollout.name, "exit_code": code, "gpu_cap_gib": args.gpu_cap_gib,
           "ballast_gb_per_gpu": ballast_gb if ballast else None,
           "device_peak_gb": max(peaks.values()) if peaks else None, "device_peak_gib": max(peaks.values()) * 1e9 / 2**30
           if peaks else None, "device_peak_gb_per_gpu": peaks, "process_peak_gb": extra["process_peaks"],
           **summarise(metrics, max(ballast_gb.values()))}
    append_row(args.out, row, code, tail)
    if row["steps_done"]:
        gpu_gib = args.gpu_cap_gib or gpu_memory_gib()
        append_row(args.out, plan_row(cfg, row, gpu_gib, host_memory_gib()), 0, "")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
