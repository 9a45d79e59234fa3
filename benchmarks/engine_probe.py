"""Standalone SGLang under several engine settings, on a recipe's prompts and random weights of a shape: rollout.n
samples of each of --prompts prompts, to data.max_response_length tokens (EOS ignored, so every response runs to full
length), in --rounds timed rounds of each --variants request variant after a warm-up (standalone.py: `plain`,
`as_colocated` with log-probs and the prefix cache flushed, `handover` with the engine's memory released and resumed
before each round, which needs `"enable_memory_saver": true, "enable_weights_cpu_backup": true` in --engine). Each
setting runs in a process of its own; one row (`what: engine-probe`) per setting to --out. The questions it answers:
how fast can generation alone be, which bounds the step, and what of a colocated step's generation is the engine's.

    python benchmarks/engine_probe.py --recipe recipes/qwen3_0_6b_grpo_gsm8k.yaml --shape qwen3-0.6b --prompts 32 \\
        --data data/gsm8k --out $OUT/engine.json \\
        --engine '{"attention_backend": "triton", "sampling_backend": "pytorch"}' \\
        '{"attention_backend": "flashinfer", "sampling_backend": "pytorch"}' [--variants plain as_colocated]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

from rl_memory import append_row
from rl_step import REPO, prepare, prompt_ids
from standalone import VARIANTS, timed_rounds


def generate(model: str, prompts_file: str, engine: dict, tp: int, share: float, max_new: int, variants: list[str],
             rounds: int, py_spy: str) -> None:
    """In the child process: each variant's figures as a last `RESULT {json}` line."""
    requests = json.loads(Path(prompts_file).read_text())
    sampling = {"temperature": 1.0, "max_new_tokens": max_new, "ignore_eos": True}
    chosen = {name: VARIANTS[name] for name in variants}
    print("RESULT", json.dumps(timed_rounds(model, requests, sampling, tp, share, engine, chosen, rounds,
                                            Path(py_spy) if py_spy else None)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", type=Path, required=True, help="its prompts, rollout.n, lengths and memory share")
    parser.add_argument("--shape", required=True, help="a megarl.models.shapes.SHAPES name (random weights)")
    parser.add_argument("--set", nargs="*", default=[], help="more recipe overrides")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--work", type=Path, default=Path("/tmp/engine_probe"))
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared/data/gsm8k")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--engine", nargs="+", required=True, help="SGLang engine arguments, a JSON object each")
    parser.add_argument("--variants", nargs="+", default=["plain"], choices=sorted(VARIANTS),
                        help="request variants, timed round by round in each engine")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--py-spy", default="", help="a folder: py-spy samples each variant's last round there")
    args = parser.parse_args()

    from megarl.config import load_config

    args.work.mkdir(parents=True, exist_ok=True)
    model, train = prepare(args, args.work)
    cfg = load_config(args.recipe, [f"model.path={model}", *args.set])
    requests = [p for p in prompt_ids(cfg, model, train, args.prompts) for _ in range(cfg.rollout.n)]
    prompts_file = args.work / "prompts.json"
    prompts_file.write_text(json.dumps(requests))
    code = 0
    for engine in args.engine:
        child = [sys.executable, __file__, "--child", str(model), str(prompts_file), engine,
                 str(cfg.rollout.tensor_model_parallel_size), str(cfg.rollout.gpu_memory_utilization),
                 str(cfg.data.max_response_length), ",".join(args.variants), str(args.rounds), args.py_spy]
        proc = subprocess.run(child, capture_output=True, text=True)
        results = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        row = {"date": datetime.date.today().isoformat(), "commit": os.environ.get("MEGARL_COMMIT", "unknown"),
               "machine": os.environ.get("MEGARL_MACHINE", "unknown"), "what": "engine-probe",
               "command": "python benchmarks/engine_probe.py " + " ".join(sys.argv[1:]), "recipe": str(args.recipe),
               "model_shape": args.shape, "dtype": "bf16", "backend": "sglang",
               "rollout_tp": cfg.rollout.tensor_model_parallel_size, "requests": len(requests),
               "response_len": cfg.data.max_response_length, "engine": json.loads(engine),
               "variants": json.loads(results[-1][len("RESULT "):]) if results else {}}
        code = append_row(args.out, row, proc.returncode, proc.stdout + proc.stderr) or code
    return code


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        model_dir, prompts_path, kwargs, tp, share, max_new, variant_names, rounds, py_spy_dir = sys.argv[2:11]
        generate(model_dir, prompts_path, json.loads(kwargs), int(tp), float(share), int(max_new),
                 variant_names.split(","), int(rounds), py_spy_dir)
    else:
        sys.exit(main())
