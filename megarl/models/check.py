"""`megarl check-model --hf DIR --tp N --pp N --cp N [--transformer-impl local|transformer_engine]` (under torchrun):
load a HF checkpoint in a parallel layout, on megatron-core's local layers or Transformer Engine's, compare its
per-token log-probs with HF transformers, and round-trip the weights back to HF.
Run it before a long job; tests and benchmarks use `check_model` too."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from megarl.config.schema import MegatronConfig
from megarl.models.accelerators import TRANSFORMER_IMPLS, transformer_engine_available, uses_transformer_engine
from megarl.process_exit import exit_process


def _random_sequences(vocab: int, count: int, length: int, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(length // 2, length + 1, (count,), generator=generator).tolist()
    return [torch.randint(0, vocab, (n,), generator=generator) for n in lengths]


def check_model(hf_dir: str, tp: int = 1, pp: int = 1, cp: int = 1, bf16: bool | None = None,
                num_sequences: int = 4, seq_length: int = 64, seed: int = 0, ep: int = 1,
                transformer_impl: str = "auto") -> dict:
    """Returns (identically on every rank) logprob_max_abs_diff against HF transformers (computed on global
    rank 0 only, broadcast) and weight_check: 'exact' when the export equals the checkpoint's tensors."""
    from megarl.models.bridge import load_hf_config
    from megarl.models.roles import build_reference
    from parallel import cpu_compat, topology

    bf16 = torch.cuda.is_available() if bf16 is None else bf16
    cpu_compat.enable()  # where this machine has no GPU, megatron runs through the CPU shim
    topology.init_distributed()
    topology.init_model_parallel(tp=tp, pp=pp, cp=cp, seed=seed, ep=ep)
    megatron = MegatronConfig(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, context_parallel_size=cp,
                              transformer_impl=transformer_impl)
    model = build_reference(hf_dir, megatron, bf16=bf16)
    vocab = load_hf_config(hf_dir).vocab_size
    sequences = _random_sequences(vocab, num_sequences, seq_length, seed)
    logprobs = model.logprobs(sequences, [list(range(num_sequences))])["logprobs"]
    exported = dict((name, tensor.cpu()) for name, tensor in model.export_hf())
    report = [None]
    if dist.get_rank() == 0:
        report[0] = _compare_with_hf(hf_dir, sequences, logprobs, exported, bf16)
    dist.broadcast_object_list(report, src=0)
    return {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "dtype": "bf16" if bf16 else "fp32",
            "transformer_impl": "transformer_engine" if uses_transformer_engine(transformer_impl) else "local",
            **report[0]}


def _compare_with_hf(hf_dir, sequences, logprobs, exported, bf16) -> dict:
    from transformers import AutoModelForCausalLM

    from megarl.models.bridge import read_hf_tensors

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if bf16 else torch.float32
    hf = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=dtype).to(device)
    worst = 0.0
    with torch.no_grad():
        for seq, lp in zip(sequences, logprobs):
            seq = seq.to(device)
            logits = hf(seq[None]).logits[0, :-1].float()
            ref = torch.log_softmax(logits, -1).gather(-1, seq[1:, None]).squeeze(-1)
            worst = max(worst, (lp.to(device) - ref).abs().max().item())
    original = read_hf_tensors(hf_dir)
    exact = sorted(original) == sorted(exported) and all(
        torch.equal(original[name].to(exported[name].dtype), exported[name]) for name in original
    )
    return {"logprob_max_abs_diff": worst, "weight_check": "exact" if exact else "mismatch"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="megarl check-model", description=__doc__)
    parser.add_argument("--hf", required=True, help="HF checkpoint directory")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--cp", type=int, default=1)
    parser.add_argument("--ep", type=int, default=1, help="expert parallelism (a mixture-of-experts model)")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], help="default: bf16 on GPU, fp32 on CPU")
    parser.add_argument("--transformer-impl", choices=TRANSFORMER_IMPLS, default="auto",
                        help="the layers: megatron-core's local ones (auto) or Transformer Engine's")
    parser.add_argument("--json", help="also write the report here (rank 0)")
    args = parser.parse_args(argv)
    if not (Path(args.hf) / "config.json").is_file():
        print(f"error: --hf {args.hf} is not a HF checkpoint directory (no config.json)", file=sys.stderr)
        return 2
    bf16 = None if args.dtype is None else args.dtype == "bf16"
    if args.transformer_impl == "transformer_engine" and not transformer_engine_available():
        print("error: --transformer-impl transformer_engine needs Transformer Engine, which is not importable here "
              "(`pip install -e \".[accel]\"` where it builds)", file=sys.stderr)
        return 2
    report = check_model(args.hf, args.tp, args.pp, args.cp, bf16=bf16, ep=args.ep,
                         transformer_impl=args.transformer_impl)
    if dist.get_rank() == 0:
        print(json.dumps(report))
        if args.json:
            Path(args.json).write_text(json.dumps(report))
    from parallel import topology

    topology.destroy()
    return 0 if report["weight_check"] == "exact" else 1


if __name__ == "__main__":
    exit_process(main())
