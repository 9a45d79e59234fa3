"""`megarl convert [SCRIPT | - | key=value ...] [--out recipe.yaml]`: a verl launch script (or its overrides) as a
megarl recipe (PPO trainer: `megarl train`; SFT trainers: `megarl sft`), with what does not carry over listed on
stderr (docs/verl-keys.md)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from megarl.convert.recipe_yaml import recipe_yaml
from megarl.convert.shell import ScriptError, VerlCommand, read_script
from megarl.convert.translate import Conversion, convert
from megarl.process_exit import exit_process


def read_command(source: str, args: Sequence[str]) -> VerlCommand:
    """The verl command of a script file, of standard input (`-`), or overrides given as arguments."""
    if source == "-":
        return read_script(sys.stdin.read(), args, os.environ)
    if Path(source).is_file():
        return read_script(Path(source).read_text(), args, os.environ)
    if "=" in source:
        return VerlCommand(overrides=[source, *args])
    raise ScriptError(f"{source} is no file: give a verl launch script, - for standard input, or key=value overrides")


def report(command: VerlCommand, conversion: Conversion, source: str, written: str) -> str:
    """What a person should read: what did not carry over and why, what changed, what to check."""
    count = len(command.overrides)
    lines = [f"megarl convert: {source}, {count} verl overrides (verl's {conversion.verl_config} config) → "
             f"{written}"]
    sections = [("not carried over", conversion.dropped), ("changed (commented in the recipe)", conversion.changed),
                ("to check", conversion.notes), ("not evaluated in the script", command.notes)]
    for title, items in sections:
        if items:
            lines += [f"{title}:", *(f"  {item}" for item in items)]
    if conversion.defaults:
        lines.append(f"verl's defaults, stated where megarl's differ: {', '.join(conversion.defaults)}")
    lines.append(f"next: {conversion.schema.command} --recipe {written if written != 'stdout' else 'R.yaml'} "
                 "--dry-run")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="megarl convert", description="Turn a verl launch script (python3 -m verl.trainer.main_ppo ..., or "
        "torchrun -m verl.trainer.fsdp_sft_trainer ...) or its key=value overrides into a megarl recipe; what does "
        "not carry over is listed on stderr.")
    parser.add_argument("source", help="the launch script, - to read it from standard input, or the first override")
    parser.add_argument("args", nargs="*", help="the script's own arguments ($@), or further overrides")
    parser.add_argument("--out", help="write the recipe here (default: standard output)")
    args = parser.parse_intermixed_args(argv)
    try:
        command = read_command(args.source, args.args)
    except (ScriptError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    conversion = convert(command.overrides, command.config_name, command.module)
    source = "standard input" if args.source == "-" else args.source if command.module else "the overrides"
    header = [f"Converted by `megarl convert` from {source}; comments say where a line differs from verl's."]
    text = recipe_yaml(conversion.lines, header, conversion.schema)
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    print(report(command, conversion, source, args.out or "stdout"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    exit_process(main())
