"""Training-step throughput (forward + backward + optimizer step) of megarl's megatron actor on one GPU,
against HF transformers doing the same work on the same GPU in the same run.

    python benchmarks/fwd_bwd_throughput.py --shape qwen2.5-0.5b --out benchmarks/results/X.json

MFU counts 6·N FLOPs per token for the weights plus 6·layers·hidden·seq for causal attention (fwd+bwd),
against the H200's 989 TFLOP/s dense bf16 peak."""

import argparse
import datetime
import json
import os
import statistics
import tempfile
import time

import torch

from megarl.models.shapes import SHAPES, write_random_checkpoint
from megarl.plan.shape import ModelShape

H200_BF16_PEAK = 989e12
BACKENDS = {"local": "megatron-core local spec + SDPAttention",
            "transformer_engine": "megatron-core Transformer Engine spec"}


def profile(step, label: str) -> None:
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    averages = prof.key_averages()
    for sort_by in ("cuda_time_total", "self_cpu_time_total"):
        print(f"== {label}: top ops by {sort_by} over 3 steps")
        print(averages.table(sort_by=sort_by, row_limit=15, max_name_column_width=60))


def find_syncs(step, label: str) -> None:
    """Run `step` once under CUDA's sync-debug mode; print where device→host synchronisations happen."""
    import collections
    import traceback
    import warnings

    sites = collections.Counter()

    def record(message, category, filename, lineno, file=None, line=None):
        if "synchroniz" not in str(message):
            return
        frames = [f for f in traceback.extract_stack()[:-2] if "megarl" in f.filename or "megatron" in f.filename]
        sites[" <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}:{f.name}" for f in reversed(frames[-3:]))] += 1

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        step()
        torch.cuda.set_sync_debug_mode(0)
    print(f"== {label}: {sum(sites.values())} synchronisations in one step")
    for site, count in sites.most_common(20):
        print(f"{count:5d}  {site}")


def timed(step, iters: int, label: str, with_profile: bool, warmup: int = 3) -> float:
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    if with_profile:
        profile(step, label)
    return statistics.median(times)


def megarl_step_time(model_dir, sequences, iters, with_profile, with_syncs=False, transformer_impl="local"):
    from megarl.config.schema import MegatronConfig, OptimConfig
    from megarl.models.logprobs import vocab_parallel_logprobs_and_entropy
    from megarl.models.packing import pack_sequences
    from megarl.models.roles import build_actor
    from parallel import cpu_compat, topology

    cpu_compat.enable()  # where this machine has no GPU, megatron runs through the CPU shim
    topology.init_distributed()
    topology.init_model_parallel()
    actor = build_actor(model_dir, MegatronConfig(transformer_impl=transformer_impl), OptimConfig(lr=1e-6), total_steps=100,
                        bf16=True)
    batches = [pack_sequences(sequences, device=actor.device)]
    tokens = sum(len(s) - 1 for s in sequences)

    def loss(logits, batch):
        logprobs, _ = vocab_parallel_logprobs_and_entropy(logits, batch.labels, with_entropy=False)
        return -logprobs.sum() / tokens, {}

    if with_syncs:
        actor.train_step(batches, loss)
        find_syncs(lambda: actor.train_step(batches, loss), "megarl")
    torch.cuda.reset_peak_memory_stats()
    seconds = timed(lambda: actor.train_step(batches, loss), iters, "megarl", with_profile)
    return seconds, torch.cuda.max_memory_allocated() / 1024**3


def hf_step_time(model_dir, sequences, iters, with_profile):
    from transformers import AutoModelForCausalLM

    held_before = torch.cuda.memory_allocated()  # what megarl's pass, run first, may still hold
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, attn_implementation="sdpa").cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=True)
    ids = torch.stack(sequences).cuda()

    def step():
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    torch.cuda.reset_peak_memory_stats()
    seconds = timed(step, iters, "hf", with_profile)
    return seconds, (torch.cuda.max_memory_allocated() - held_before) / 1024**3


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shape", default="qwen2.5-0.5b", choices=sorted(SHAPES))
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--out", required=True)
    parser.add_argument("--commit", default="unknown")
    parser.add_argument("--machine", default="nvidia-h200")
    parser.add_argument("--profile", action="store_true", help="print the top CUDA kernels of each backend")
    parser.add_argument("--find-syncs", action="store_true", help="print where megarl's step synchronises")
    parser.add_argument("--transformer-impl", choices=("local", "transformer_engine"), default="local",
                        help="megarl's layers: megatron-core's local spec or Transformer Engine's")
    args = parser.parse_args()
    model_dir = write_random_checkpoint(args.shape, tempfile.mkdtemp() + "/model", dtype=torch.bfloat16)
    generator = torch.Generator().manual_seed(0)
    vocab = SHAPES[args.shape]["vocab_size"]
    sequences = [torch.randint(0, vocab, (args.seq_len,), generator=generator) for _ in range(args.batch)]
    tokens = args.batch * args.seq_len
    c = SHAPES[args.shape]
    flops_per_token = 6 * ModelShape.named(args.shape).parameters + 6 * c["num_hidden_layers"] * c["hidden_size"] * args.seq_len

    # megarl's pass first: once the HF pass has loaded torch's cuDNN sub-libraries, Transformer Engine's library
    # resolves the system's libcudnn_cnn.so.9 against them and fails to load (undefined cudnn::backend symbols).
    megarl_seconds, megarl_peak = megarl_step_time(model_dir, sequences, args.iters, args.profile, args.find_syncs,
                                                   args.transformer_impl)
    torch.cuda.empty_cache()
    hf_seconds, hf_peak = hf_step_time(model_dir, sequences, args.iters, args.profile)

    def figures(seconds, peak):
        rate = tokens / seconds
        return {"tokens_per_s": round(rate, 1), "step_s": round(seconds, 4), "peak_mem_gb": round(peak, 2),
                "mfu": round(rate * flops_per_token / H200_BF16_PEAK, 4)}

    row = {
        "date": datetime.date.today().isoformat(), "commit": args.commit, "machine": args.machine,
        "command": f"python benchmarks/fwd_bwd_throughput.py --shape {args.shape} --batch {args.batch} "
                   f"--seq-len {args.seq_len} --iters {args.iters} --transformer-impl {args.transformer_impl}",
        "what": "train-step", "model_shape": args.shape, "dtype": "bf16", "tp": 1, "pp": 1, "cp": 1, "dp": 1,
        "batch_size": args.batch, "seq_len": args.seq_len, "backend": BACKENDS[args.transformer_impl],
        **figures(megarl_seconds, megarl_peak),
        "baseline": {"backend": "hf-transformers sdpa + fused AdamW", **figures(hf_seconds, hf_peak)},
    }
    row["ratio_vs_baseline"] = round(row["tokens_per_s"] / row["baseline"]["tokens_per_s"], 3)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump([row], f, indent=1)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
