"""`megarl plan --recipe R.yaml [key=value ...] [--gpu-memory GiB] [--host-memory GiB] [--shape NAME] [--layers N]`:
each phase's predicted peak per GPU and each node's host memory, from the recipe and the model's config.json alone.

Exit codes: 0 everything fits, 1 something does not fit (the table marks it and names the cheapest change that
fits), 2 the recipe or the options are wrong (or there is no GPU memory to compare with)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from megarl.config import ConfigError, load_config
from megarl.models.shapes import SHAPES
from megarl.plan.advice import cheapest_fix
from megarl.plan.inputs import plan_inputs
from megarl.plan.machine import gpu_memory_gib, host_memory_gib
from megarl.plan.phases import plan_memory
from megarl.plan.report import render
from megarl.process_exit import exit_process


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="megarl plan", description="Predict each phase's GPU memory peak and each node's host memory for a "
        "recipe (docs/memory.md). Overrides use dotted keys, as with megarl train.",
        epilog="exit codes: 0 everything fits, 1 something does not fit, 2 a wrong recipe or option")
    parser.add_argument("--recipe", help="recipe YAML (defaults apply to every key it leaves out)")
    parser.add_argument("--gpu-memory", type=float, metavar="GiB",
                        help="one GPU's memory (default: this machine's smallest GPU, from nvidia-smi)")
    parser.add_argument("--host-memory", type=float, metavar="GiB", help="one node's memory (default: this machine's)")
    parser.add_argument("--shape", choices=sorted(SHAPES),
                        help="plan this model shape (megarl.models.shapes) instead of model.path's config.json")
    parser.add_argument("--layers", type=int, help="replace the model's layer count (benchmark shapes)")
    parser.add_argument("overrides", nargs="*", metavar="key.sub=value")
    return parser.parse_intermixed_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    gpu_gib = args.gpu_memory if args.gpu_memory is not None else gpu_memory_gib()
    if gpu_gib is None:
        print("error: this machine has no nvidia-smi to read a GPU's memory from: pass --gpu-memory GiB",
              file=sys.stderr)
        return 2
    host_gib = args.host_memory if args.host_memory is not None else host_memory_gib()
    try:
        cfg = load_config(args.recipe, args.overrides)
        inputs, source = plan_inputs(cfg, gpu_gib, host_gib, args.shape, args.layers)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    plan = plan_memory(inputs)
    print(render(inputs, plan, None if plan.fits else cheapest_fix(inputs), source))
    return 0 if plan.fits else 1


if __name__ == "__main__":
    exit_process(main())
