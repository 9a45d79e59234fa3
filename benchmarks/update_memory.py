"""What one actor's log-prob pass and update hold on one GPU, part by part (torch's allocator in this process, and the
process's device memory from nvidia-smi), to check `megarl plan`'s parts against. Its update's loss is the mean of
the fp32 logits, not the RL loss: the update's vocabulary-sized tensors are not an RL update's.

    torchrun --nproc-per-node 1 benchmarks/update_memory.py --layers 12 --tokens 12288 --recompute full --out r.json

A Qwen3-8B-shaped model with random megatron initialisation (only config.json is written), bf16, TP 1; one packed
micro-batch of `--tokens` tokens in sequences of 1280.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

GB = 1e9


def process_device_gb() -> float:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    mine = [int(used) for pid, used in (line.split(",") for line in out.strip().splitlines()) if int(pid) == os.getpid()]
    return mine[0] * 2**20 / GB if mine else float("nan")


def snapshot(label: str, rows: dict) -> None:
    torch.cuda.synchronize()
    rows[label] = {"allocated_gb": torch.cuda.memory_allocated() / GB,
                   "peak_allocated_gb": torch.cuda.max_memory_allocated() / GB,
                   "reserved_gb": torch.cuda.memory_reserved() / GB, "process_gb": process_device_gb()}
    torch.cuda.reset_peak_memory_stats()


def main() -> int:
    from megarl.config.schema import MegatronConfig, OptimConfig
    from megarl.models.packing import pack_sequences
    from megarl.models.roles import build_actor
    from megarl.models.shapes import hf_config
    from parallel import topology

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=12288)
    parser.add_argument("--recompute", choices=("full", "none"), default="full")
    parser.add_argument("--offload", choices=("none", "all"), default="all")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    model_dir = Path("/tmp/update_memory_model")
    hf_config("qwen3-8b", num_hidden_layers=args.layers).save_pretrained(model_dir)
    topology.init_distributed(timeout_s=300)
    topology.init_model_parallel()
    offload = args.offload == "all"
    megatron = MegatronConfig(recompute_granularity="full" if args.recompute == "full" else None,
                              optimizer_offload=offload, param_offload=offload, grad_offload=offload)
    rows: dict = {}
    snapshot("start", rows)
    actor = build_actor(model_dir, megatron, OptimConfig(lr=1e-6), total_steps=2, bf16=True, load_weights=False)
    snapshot("built", rows)
    params = sum(t.numel() for _, t in actor.named_parameters())
    seqs = [torch.randint(0, 151936, (1280,)) for _ in range(args.tokens // 1280)]
    actor.logprobs(seqs, [list(range(len(seqs)))], with_entropy=True)
    snapshot("logprob_pass", rows)
    batch = [pack_sequences(seqs, device=torch.device("cuda"))]
    for step in range(2):
        actor.train_step(batch, lambda out, b: (out.float().mean(), {}))
        snapshot(f"update_{step + 1}", rows)
    row = {"date": datetime.date.today().isoformat(), "commit": os.environ.get("MEGARL_COMMIT", "unknown"),
           "machine": os.environ.get("MEGARL_MACHINE", "unknown"), "what": "memory-parts",
           "command": "torchrun --nproc-per-node 1 benchmarks/update_memory.py " + " ".join(sys.argv[1:]),
           "model_shape": "qwen3-8b", "layers": args.layers, "params": params, "tokens": args.tokens,
           "recompute": args.recompute, "offload": args.offload, "dtype": "bf16", "tp": 1, "phases": rows}
    existing = json.loads(args.out.read_text()) if args.out.exists() else []
    args.out.write_text(json.dumps(existing + [row], indent=1))
    print(json.dumps(row, indent=1))
    topology.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
