"""The `megarl` command: train, sft, rm, preprocess, check-model, export, convert, ..."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn, Sequence

from megarl.process_exit import exit_process

PREPROCESS_OPTIONS = ("data_source", "question_key", "solution_key", "instruction")
# The bundled tasks `megarl preprocess` generates: module, writer (imported when chosen: the CLI starts fast).
GENERATED = {"arithmetic": ("megarl.data.arithmetic", "write_arithmetic"),
             "products": ("megarl.data.products", "write_products")}


def preprocess_main(argv: Sequence[str]) -> int:
    from megarl.data.preprocess import PREPROCESSORS, PreprocessError, preprocess

    parser = argparse.ArgumentParser(
        prog="megarl preprocess", description="Convert a dataset into train/test parquet in verl's row schema."
    )
    parser.add_argument("kind", choices=[*PREPROCESSORS.names(), *GENERATED],
                        help="arithmetic, products: generate a tiny recipe's bundled task (train, test and sft "
                             "splits; products is the tools recipe's)")
    parser.add_argument("--input", help="a jsonl/json/parquet file, a directory of them, or a HF dataset name")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--split", help="the split of a single input file, when its name does not say")
    parser.add_argument("--data-source", help="math/custom: the data_source written into each row")
    parser.add_argument("--question-key", help="math/custom: the field holding the question")
    parser.add_argument("--solution-key", help="math/custom: the field holding the \\boxed{} solution")
    parser.add_argument("--instruction", help="math/custom: the text appended to each question ('' for none)")
    args = parser.parse_args(argv)
    options = {k: getattr(args, k) for k in PREPROCESS_OPTIONS if getattr(args, k) is not None}
    if options and args.kind in ("gsm8k", *GENERATED):
        parser.error(f"--{'/--'.join(k.replace('_', '-') for k in options)} apply to math and custom, not {args.kind}")
    if (args.input is None) != (args.kind in GENERATED):
        parser.error(f"{args.kind} is generated: drop --input" if args.input else f"{args.kind} needs --input")
    if args.kind in GENERATED:
        module, writer = GENERATED[args.kind]
        for split, path in getattr(importlib.import_module(module), writer)(args.output_dir).items():
            print(f"{split}: {path}")
        return 0
    try:
        written = preprocess(args.kind, args.input, args.output_dir, split=args.split, **options)
    except PreprocessError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for split, path in written.items():
        print(f"{split}: {path}")
    return 0


COMMANDS = {
    "train": ("megarl.train", "run an RL recipe (PPO, GRPO, ...)"),
    "sft": ("megarl.sft", "supervised fine-tuning: a HF checkpoint to start RL from"),
    "rm": ("megarl.rm", "train a reward model on ranked responses (InstructGPT stage 2)"),
    "preprocess": ("megarl.cli", "convert GSM8K, MATH or custom data into RL parquet"),
    "sample-rankings": ("megarl.data.rankings", "reward-model rankings from a policy's samples, graded by rule"),
    "check-model": ("megarl.models.check", "load a HF checkpoint in a parallel layout and compare with HF"),
    "export": ("megarl.models.export", "turn a megarl model checkpoint into a HF checkpoint"),
    "init-model": ("megarl.models.init_model", "write a random-weight HF checkpoint of a recipe's model shape"),
    "convert": ("megarl.convert.command", "turn a verl launch script (or its overrides) into a megarl recipe"),
    "plan": ("megarl.plan.command", "predict a recipe's GPU and host memory per phase; what to change if it does not fit"),
    "view": ("megarl.view.command", "a run's curves, samples and validations in the browser (one offline page)"),
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        lines = "\n".join(f"  {name:<12}{help_}" for name, (_, help_) in COMMANDS.items())
        print(f"usage: megarl COMMAND [ARGS]\n\ncommands:\n{lines}", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    command, rest = argv[0], argv[1:]
    if command == "preprocess":
        return preprocess_main(rest)
    return importlib.import_module(COMMANDS[command][0]).main(rest)


def console() -> NoReturn:
    """The `megarl` console script (setup.py)."""
    exit_process(main())


if __name__ == "__main__":
    console()
