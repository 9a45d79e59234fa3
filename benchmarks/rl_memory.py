"""GRPO steps of a Qwen3-8B-shaped model (random weights, responses to full length) under torchrun with SGLang, and
the memory each phase takes on the device: the run's own `memory/*/peak_gb` metrics (device-wide) and, as a cross-check,
`nvidia-smi --query-gpu=memory.used` sampled every 0.2 s over the whole run. Appends one row per run to --out.

    python benchmarks/rl_memory.py --layers 12 --tp 1 --gpus 1 --label no-offload --out $OUT/memory.json
    python benchmarks/rl_memory.py --layers 12 --tp 1 --gpus 1 --offload optimizer --out $OUT/memory.json
    python benchmarks/rl_memory.py --layers 12 --tp 1 --gpus 1 --lora-rank 32 --out $OUT/memory.json   # LoRA

Settings are seed 003's (recipes/qwen3_8b_grpo_gsm8k_4gpu.yaml, GRPO, low_var_kl 0.001 as a loss): n 8, batch 8,
256 prompt / 1024 response tokens, full recompute, token budget 12288.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OFFLOADS = {name: [f"actor.megatron.{key}_offload={str(key in keys).lower()}" for key in ("optimizer", "param", "grad")]
            for name, keys in {"none": (), "optimizer": ("optimizer",), "all": ("optimizer", "param", "grad")}.items()}
ENGINE = ["rollout.engine_kwargs.attention_backend=triton", "rollout.engine_kwargs.sampling_backend=pytorch",
          "rollout.engine_kwargs.cuda_graph_max_bs_decode=64"]


class DeviceSampler(threading.Thread):
    """The largest `memory.used` nvidia-smi reports for each GPU while the run lasts (every process counted), and
    each process's largest share (which says how much is the engine's and how much the trainer's)."""

    def __init__(self):
        super().__init__(daemon=True)
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
                key = f"{pid} {name.rsplit('/', 1)[-1]}"
                self.process_peaks[key] = max(self.process_peaks.get(key, 0.0), int(used_mib) * 2**20 / 1e9)
            time.sleep(0.2)


def prepare(args, work: Path) -> tuple[Path, dict]:
    from megarl.data.preprocess import preprocess
    from megarl.models.init_model import write_model

    import torch

    model = work / f"qwen3-8b-{args.layers}l"
    if not (model / "config.json").exists():
        write_model("qwen3-8b", model, dtype=torch.bfloat16, num_hidden_layers=args.layers)
    data = preprocess("gsm8k", str(args.data), work / "gsm8k") if not (work / "gsm8k/train.parquet").exists() \
        else {"train": work / "gsm8k/train.parquet"}
    return model, data


def run(args, model: Path, data: dict, out_dir: Path) -> tuple[int, str, dict]:
    overrides = [f"model.path={model}", f"data.train_files=[{data['train']}]", "data.val_files=[]",
                 "data.train_batch_size=8", "data.max_prompt_length=256", "data.max_response_length=1024",
                 "actor.ppo_mini_batch_size=8", f"actor.megatron.tensor_model_parallel_size={args.tp}",
                 f"rollout.tensor_model_parallel_size={args.tp}", f"trainer.n_gpus_per_node={args.gpus}",
                 f"trainer.total_training_steps={args.steps}", "trainer.save_freq=-1", "trainer.test_freq=-1",
                 "trainer.val_before_train=false", f"trainer.output_dir={out_dir}",
                 f"rollout.gpu_memory_utilization={args.engine_share}", *ENGINE, *OFFLOADS[args.offload], *args.set]
    if args.lora_rank:  # adapters on every linear layer, alpha = 2 × rank
        overrides += [f"actor.lora.rank={args.lora_rank}", f"actor.lora.alpha={2 * args.lora_rank}"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.gpus), "-m", "megarl.train",
           "--recipe", str(REPO / "recipes/qwen3_8b_grpo_gsm8k_4gpu.yaml"), *overrides]
    sampler = DeviceSampler()
    sampler.start()
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    if args.alloc_conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = args.alloc_conf
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    sampler.stopped.set()
    sampler.join()
    return proc.returncode, (proc.stdout[-3000:] + proc.stderr[-8000:]), {
        "cmd_overrides": overrides, "peaks": sampler.peaks, "process_peaks": sampler.process_peaks}


def summarise(metrics: list[dict]) -> dict:
    """Per phase the largest device-wide peak over the steps; the median of each timing and of tokens/s."""
    steps = [m for m in metrics if m.get("step", 0) > 0]
    keys = sorted({k for m in steps for k in m if k.startswith("memory/")})  # peaks and reservations (GB)
    timing = sorted({k for m in steps for k in m if k.startswith("timing_s/")})

    def median(key):
        values = sorted(m[key] for m in steps if key in m)
        return values[len(values) // 2] if values else None

    return {"steps_done": len(steps), "memory_gb": {k: max(m.get(k, 0.0) for m in steps) for k in keys},
            "timing_s_median": {k: median(k) for k in timing}, "tokens_per_s_per_gpu": median("perf/throughput"),
            "step_s": median("timing_s/step"), "score_mean": [m.get("critic/score/mean") for m in steps],
            "actor_grad_norm": [m.get("actor/grad_norm") for m in steps],
            "kl_loss": [m.get("actor/kl_loss") for m in steps],
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--offload", choices=sorted(OFFLOADS), default="none")
    parser.add_argument("--engine-share", type=float, default=0.5, help="rollout.gpu_memory_utilization")
    parser.add_argument("--lora-rank", type=int, default=0, help="actor.lora.rank (0: full fine-tuning)")
    parser.add_argument("--set", nargs="*", default=[], help="more recipe overrides")
    parser.add_argument("--label", default="")
    parser.add_argument("--alloc-conf", default=None, help="PYTORCH_CUDA_ALLOC_CONF for the run's processes")
    parser.add_argument("--work", type=Path, default=Path("/tmp/rl_memory"))
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared/data/gsm8k")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    model, data = prepare(args, args.work)
    out_dir = args.work / f"run-{args.label or args.offload}-{int(time.time())}"
    code, tail, extra = run(args, model, data, out_dir)
    metrics_file = out_dir / "metrics.jsonl"
    metrics = [json.loads(line) for line in metrics_file.read_text().splitlines()] if metrics_file.exists() else []
    row = {"date": datetime.date.today().isoformat(), "commit": os.environ.get("MEGARL_COMMIT", "unknown"),
           "machine": os.environ.get("MEGARL_MACHINE", "unknown"), "what": "memory", "label": args.label,
           "command": "python benchmarks/rl_memory.py " + " ".join(sys.argv[1:]), "model_shape": "qwen3-8b",
           "layers": args.layers, "dtype": "bf16", "tp": args.tp, "rollout_tp": args.tp, "gpus_used": args.gpus,
           "offload": args.offload, "lora_rank": args.lora_rank, "engine_share": args.engine_share, "alloc_conf": args.alloc_conf, "n": 8, "batch": 8,
           "prompt_len": 256, "response_len": 1024, "backend": "sglang", "exit_code": code,
           "device_peak_gb": max(extra["peaks"].values()) if extra["peaks"] else None,
           "device_peak_gb_per_gpu": extra["peaks"], "process_peak_gb": extra["process_peaks"],
           **summarise(metrics)}
    return append_row(args.out, row, code, tail)


if __name__ == "__main__":
    sys.exit(main())
