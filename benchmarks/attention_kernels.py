"""Packed causal attention kernels side by side on one GPU, at a model's head shapes: the one megarl's local layers
call (torch's FlashAttention varlen kernel, megarl.models.attention.varlen_causal), Transformer Engine's
DotProductAttention over THD sequences (what TE's layers call), held to one backend per run (`--te-backend`: cuDNN's
fused attention, or flash-attn, which TE 2.20 takes as FlashAttention-4 where that imports), and the flash-attn
packages where they import (FlashAttention-2's `flash_attn`; FlashAttention-4's CuTe-DSL `flash_attn.cute`, staged by
benchmarks/accel/stage_fa4.sh). The first kernel that imports is the reference for the others' outputs; a bf16 GEMM
measured in the same run is the hardware reference.

    python benchmarks/attention_kernels.py --shape qwen2.5-0.5b qwen3-0.6b --out $OUT/attention.json

Each kernel runs the same packed batch (sequence lengths drawn uniformly in [mean/2, 3·mean/2] up to `--tokens`),
forward alone and forward + backward; the row gives medians, TFLOP/s (causal: forward 2·Σ L²·d·heads, backward
2.5× that), the ratio to the GEMM, and each kernel's largest difference from the first kernel's output and
gradients."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from megarl.models.shapes import SHAPES

# TE chooses among flash-attn (2, 3 or 4, whichever imports), cuDNN's fused attention and its unfused path; with one
# allowed, a call it cannot serve fails instead of falling back unseen. Read when TE is imported, so one per process.
TE_BACKENDS = {"cudnn": {"NVTE_FLASH_ATTN": "0", "NVTE_UNFUSED_ATTN": "0"},
               "flash": {"NVTE_FUSED_ATTN": "0", "NVTE_UNFUSED_ATTN": "0"}}


@dataclass(frozen=True)
class Batch:
    lengths: list[int]
    heads: int
    kv_heads: int
    head_dim: int

    @property
    def tokens(self) -> int:
        return sum(self.lengths)

    def forward_flops(self) -> float:
        return 2.0 * sum(length * length for length in self.lengths) * self.head_dim * self.heads


def draw_lengths(tokens: int, mean: int, seed: int) -> list[int]:
    """Sequence lengths uniform in [mean/2, 3·mean/2] whose sum is `tokens` (the last one cut to fit)."""
    rng, lengths = random.Random(seed), []
    while sum(lengths) < tokens:
        lengths.append(min(rng.randint(mean // 2, 3 * mean // 2), tokens - sum(lengths)))
    return lengths


Kernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor]


def torch_flash(batch: Batch) -> Kernel:
    from megarl.models.attention import varlen_attn, varlen_causal

    if varlen_attn is None:
        raise ImportError("torch has no torch.nn.attention.varlen")
    return lambda q, k, v, cu, longest: varlen_causal(q, k, v, cu, longest, batch.head_dim ** -0.5)


def transformer_engine(batch: Batch) -> Kernel:
    import transformer_engine.pytorch as te

    module = te.DotProductAttention(batch.heads, batch.head_dim, num_gqa_groups=batch.kv_heads, attention_dropout=0.0,
                                    qkv_format="thd", attn_mask_type="padding_causal")
    return lambda q, k, v, cu, longest: module(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=longest,
                                               max_seqlen_kv=longest).reshape(q.shape[0], -1)


def flash_attn_package(batch: Batch) -> Kernel:
    from flash_attn import flash_attn_varlen_func

    return lambda q, k, v, cu, longest: flash_attn_varlen_func(
        q, k, v, cu, cu, longest, longest, softmax_scale=batch.head_dim ** -0.5, causal=True).reshape(q.shape[0], -1)


def flash_attn_4(batch: Batch) -> Kernel:
    from flash_attn.cute import flash_attn_varlen_func

    def run(q, k, v, cu, longest):
        out = flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=longest,
                                     max_seqlen_k=longest, softmax_scale=batch.head_dim ** -0.5, causal=True)
        return (out[0] if isinstance(out, tuple) else out).reshape(q.shape[0], -1)

    return run


# TE's first: its library resolves cuDNN's sub-libraries by name, and meets torch's when another kernel loaded them.
KERNELS: dict[str, Callable[[Batch], Kernel]] = {
    "te": transformer_engine, "torch-flash-varlen": torch_flash, "flash-attn": flash_attn_package,
    "flash-attn-4": flash_attn_4}


def median_ms(run: Callable[[], object], iters: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def gemm_tflops(iters: int, size: int = 8192) -> float:
    a, b = (torch.randn(size, size, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return 2 * size ** 3 / median_ms(lambda: a @ b, iters) / 1e9


def measure(kernel: Kernel, batch: Batch, iters: int) -> tuple[dict, list[torch.Tensor]]:
    generator = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(batch.tokens, h, batch.head_dim, device="cuda", dtype=torch.bfloat16, generator=generator,
                           requires_grad=True) for h in (batch.heads, batch.kv_heads, batch.kv_heads))
    grad = torch.randn(batch.tokens, batch.heads * batch.head_dim, device="cuda", dtype=torch.bfloat16,
                       generator=generator)
    cu = torch.tensor([0, *torch.tensor(batch.lengths).cumsum(0).tolist()], device="cuda", dtype=torch.int32)
    longest = max(batch.lengths)

    def forward():
        with torch.no_grad():
            kernel(q, k, v, cu, longest)

    def forward_backward():
        torch.autograd.grad(kernel(q, k, v, cu, longest), (q, k, v), grad)

    out = kernel(q, k, v, cu, longest)
    results = [out.detach(), *torch.autograd.grad(out, (q, k, v), grad)]
    figures = {"fwd_ms": median_ms(forward, iters), "fwd_bwd_ms": median_ms(forward_backward, iters)}
    flops = batch.forward_flops()
    figures["fwd_tflops"] = flops / figures["fwd_ms"] / 1e9
    figures["fwd_bwd_tflops"] = 3.5 * flops / figures["fwd_bwd_ms"] / 1e9
    return figures, results


def compare_kernels(batch: Batch, names: list[str], iters: int, gemm: float, te_backend: str) -> dict:
    kernels, reference = {}, None
    for key in names:
        name = f"te-{te_backend}" if key == "te" else key
        try:
            kernel = KERNELS[key](batch)
        except ImportError as error:
            kernels[name] = {"skipped": f"not importable here: {error}"}
            continue
        figures, results = measure(kernel, batch, iters)
        if reference is None:
            reference, figures["reference"] = results, True
        else:
            figures["max_abs_diff"] = {part: (mine.float() - theirs.float()).abs().max().item()
                                       for part, mine, theirs in zip(("out", "dq", "dk", "dv"), results, reference)}
        figures["fwd_bwd_of_gemm"] = figures["fwd_bwd_tflops"] / gemm
        kernels[name] = figures
    return kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", nargs="+", default=["qwen2.5-0.5b", "qwen3-0.6b"], choices=sorted(SHAPES))
    parser.add_argument("--tokens", type=int, default=16384, help="packed tokens per call (a micro-batch)")
    parser.add_argument("--mean-length", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=list(KERNELS))
    parser.add_argument("--te-backend", choices=list(TE_BACKENDS), default="cudnn",
                        help="the one attention backend TE may use: cuDNN's fused attention, or flash-attn")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--machine", default="", help="the device kind, for the row")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.environ.update(TE_BACKENDS[args.te_backend])
    gemm = gemm_tflops(args.iters)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    rows = []
    for shape in args.shape:
        config = SHAPES[shape]
        heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        for mean in args.mean_length:
            batch = Batch(draw_lengths(args.tokens, mean, seed=mean), heads, kv_heads, head_dim)
            rows.append({
                "date": datetime.date.today().isoformat(), "commit": os.environ.get("MEGARL_COMMIT", commit),
                "machine": args.machine, "card": torch.cuda.get_device_name(), "what": "attention-kernels",
                "command": "python benchmarks/attention_kernels.py " + " ".join(sys.argv[1:]),
                "model_shape": shape, "dtype": "bfloat16", "heads": heads, "kv_heads": kv_heads,
                "head_dim": head_dim, "tokens": batch.tokens, "sequences": len(batch.lengths), "mean_length": mean,
                "torch": torch.__version__, "baseline": {"gemm_bf16_tflops": gemm, "gemm": "8192x8192x8192"},
                "kernels": compare_kernels(batch, args.kernels, args.iters, gemm, args.te_backend)})
            print(json.dumps({k: rows[-1][k] for k in ("model_shape", "mean_length", "kernels")}), flush=True)
    with open(args.out, "w") as out:
        json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
