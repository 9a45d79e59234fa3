"""`megarl plan` against every measured run of benchmarks/rl_memory.py in result files: each `what: memory` row's
config rebuilt from its recorded command, planned with the planner of this checkout, and compared phase by phase
with the measured device-wide peak; beside it the trainer's torch reservation in the phase, the device-wide
memory outside it (the engine, the trainer process's memory outside torch's allocator) and, in runs that recorded
it, what the trainer's live tensors took of the reservation.

    python benchmarks/plan_check.py benchmarks/results/2026-11-2[34]-memory.json benchmarks/results/*-lora-gpu.json
    python benchmarks/plan_check.py --data ../shared/data/gsm8k FILES   # also the runs' real largest micro-batches

With --data, the loader's batches of each run are rebuilt (the benchmark's 400-token tokenizer, the recipe's seed,
full-length responses) and split as megarl splits them: the largest micro-batch of each phase, in tokens. Each phase
is then also planned at it: `megarl plan` takes the recipe's worst case (every prompt at max_prompt_length, or a full
token budget), which runs of GSM8K's shorter prompts need not reach; planned at the run's own micro-batches the
error is the memory model's alone. --out appends the comparisons as `what: plan` rows.

Rows measure the code of their commit. A phase that a later commit changed (its memory, or how it is measured) is
marked `superseded by` that commit and left out of the verdict (benchmarks/superseded.py lists the changes and the
configurations each touched); the summary at the end gives, per row, the worst error over the phases that still
describe today's code, at the recipe's worst case and at the run's own micro-batches.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

from plan_rows import plan_row
from rl_memory import REPO, parse_args as memory_args, recipe_overrides
from superseded import superseded

from megarl.config import load_config
from megarl.plan.calibration import GIB
from megarl.plan.inputs import get_key
from megarl.plan.tokens import BATCHING

GPU_GIB = {"nvidia-h200": 140.4, "nvidia-h200-x2": 140.4, "nvidia-h100-x1": 79.6474609375,
           "nvidia-h100-x2": 79.6474609375}  # nvidia-smi's totals


def measured_rows(files: list[Path]):
    for file in files:
        for row in json.loads(file.read_text()):
            if row.get("what") in ("memory", "lora-memory") and row.get("memory_gb"):
                yield row


def recipe_at(commit: str, recipe: str, work: Path) -> Path:
    """The recipe as the run had it (the file at the row's commit), so a later edit of the recipe does not move the
    comparison; this checkout's file when that commit is not in this clone."""
    sha = commit.split()[0]
    shown = subprocess.run(["git", "show", f"{sha}:{recipe}"], cwd=REPO, capture_output=True, text=True)
    if shown.returncode != 0:
        return REPO / recipe
    path = work / "recipes" / sha / Path(recipe).name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(shown.stdout)
    return path


def run_config(row: dict):
    """The run's loaded config and its rl_memory options, from the recorded command and commit."""
    args = memory_args(shlex.split(row["command"])[2:])
    overrides = recipe_overrides(args, args.work / "model", args.work / "train.parquet", args.work / "run")
    return load_config(str(recipe_at(row["commit"], args.recipe, args.work)), overrides), args


def compare(row: dict, micro_batches: dict[str, int] | None = None) -> tuple[list[str], dict]:
    """Printable lines and the `what: plan` row of `row`'s comparison (with `micro_batches`, also planned at them)."""
    cfg, args = run_config(row)
    gpu_gib = args.gpu_cap_gib or GPU_GIB[row["machine"]]
    plan = plan_row(cfg, row, gpu_gib, 1000.0, args.shape, args.layers, micro_batches)
    gone = superseded(row, cfg, REPO)
    plan["superseded"] = {name: commits for name, commits in gone.items() if name in plan["phases"]}
    lines = [f"{row['label']} ({row['commit']}, {row['machine']}, {gpu_gib:g} GiB)"]
    for name, phase in plan["phases"].items():
        reserved = row["memory_gb"].get(f"memory/{name}/reserved_gb")
        allocated = row["memory_gb"].get(f"memory/{name}/allocated_gb")
        at_run = (f"  at the run's micro-batch {phase['predicted_at_run_micro_batch_gib']:7.2f} "
                  f"{phase['error_at_run_micro_batch']:+6.1%}" if micro_batches else "")
        split = (f"  trainer reserved {reserved * 1e9 / GIB:6.2f}, outside it "
                 f"{phase['measured_gib'] - reserved * 1e9 / GIB:6.2f}" if reserved is not None else "")
        split += f", its tensors {allocated * 1e9 / GIB:6.2f}" if allocated is not None else ""
        split += f"  superseded by {', '.join(gone[name])}" if name in gone else ""
        lines.append(f"  {name:13} plan {phase['predicted_gib']:7.2f}  measured {phase['measured_gib']:7.2f}  "
                     f"{phase['error']:+6.1%}{at_run}{split}")
    return lines, plan


def worst_current(plan: dict, key: str = "error") -> tuple[str, float] | None:
    """The phase of `plan` (a `what: plan` row) with the largest |`key`| among those no later commit superseded."""
    current = [(name, phase[key]) for name, phase in plan["phases"].items()
               if name not in plan["superseded"] and key in phase]
    return max(current, key=lambda item: abs(item[1]), default=None)


def summary(plans: list[dict]) -> list[str]:
    """Per row, the worst error over its current phases (worst case; at the run's micro-batches), or what
    superseded every phase it measured."""
    lines = ["", "summary: the worst error over the phases that describe today's code (worst case; at the run's "
             "micro-batches)"]
    for plan in plans:
        name = f"{plan['measured_row']} ({plan['commit'].split()[0][:7]}, {plan['machine']})"
        worst, at_run = worst_current(plan), worst_current(plan, "error_at_run_micro_batch")
        if worst is None:
            commits = sorted({c for cs in plan["superseded"].values() for c in cs})
            lines.append(f"  {name:50} superseded in every phase, by {', '.join(commits)}")
            continue
        text = f"{worst[0]} {worst[1]:+.1%}" + (f"; {at_run[0]} {at_run[1]:+.1%}" if at_run else "")
        within = abs((at_run or worst)[1]) <= 0.10
        lines.append(f"  {name:50} {text:40} {'within' if within else 'OUTSIDE'} ±10 %"
                     + (f"; superseded: {', '.join(plan['superseded'])}" if plan["superseded"] else ""))
    return lines


def largest_micro_batches(row: dict, data: Path, work: Path) -> dict[str, int]:
    """Per phase, the most tokens one micro-batch held over the run's steps (responses at full length)."""
    from megarl.data.dataset import PromptLoader, RLDataset
    from megarl.data.preprocess import preprocess
    from megarl.models.packing import MicroBatching
    from megarl.models.tokenizer import CHATML_TEMPLATE, DEFAULT_CORPUS, build_tokenizer

    cfg, _ = run_config(row)
    if not (work / "gsm8k/train.parquet").exists():
        preprocess("gsm8k", str(data), work / "gsm8k")
    tokenizer = build_tokenizer(work / "tokenizer", DEFAULT_CORPUS, vocab_size=400, chat_template=CHATML_TEMPLATE)
    dataset = RLDataset.from_config([str(work / "gsm8k/train.parquet")], tokenizer, cfg.data)
    batches = iter(PromptLoader(dataset, cfg.data.generation_batch_size, shuffle=cfg.data.shuffle,
                                seed=cfg.trainer.seed))
    largest: dict[str, int] = {}
    for _ in range(row["steps_done"]):
        lengths = [len(p) + cfg.data.max_response_length for p in next(batches)["prompt_ids"]
                   for _ in range(cfg.rollout.n)]
        for phase, batching in BATCHING.items():
            if batching.role == "critic" and not cfg.use_critic:
                continue
            dp = cfg.dp_size(batching.role)
            rank = lengths[:len(lengths) // dp]  # the first data-parallel rank's contiguous share
            per_pass = (get_key(cfg, batching.mini_batch_key) * cfg.rollout.n // dp if batching.mini_batch_key
                        else len(rank))
            split = MicroBatching(dynamic=get_key(cfg, batching.dynamic_key),
                                  per_gpu=get_key(cfg, batching.samples_key),
                                  max_tokens=get_key(cfg, batching.tokens_key)).split
            for start in range(0, len(rank), per_pass):
                part = rank[start:start + per_pass]
                largest[phase] = max(largest.get(phase, 0), *(sum(part[i] for i in mb) for mb in split(part)))
    return largest


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--data", type=Path, help="GSM8K's raw files: also plan at each run's real micro-batches")
    parser.add_argument("--label", action="append", help="only the runs of this label (repeatable)")
    parser.add_argument("--commit", action="append",
                        help="only the runs at this commit, as their rows name it first (repeatable)")
    parser.add_argument("--out", type=Path, help="append each comparison as a `what: plan` row to this JSON list")
    parser.add_argument("--work", type=Path, default=Path("/tmp/plan_check"))
    args = parser.parse_args()
    rows = []
    for row in measured_rows(args.files):
        if args.label and row["label"] not in args.label:
            continue
        if args.commit and row["commit"].split()[0] not in args.commit:
            continue
        micro_batches = largest_micro_batches(row, args.data, args.work) if args.data else None
        lines, plan = compare(row, micro_batches)
        print("\n".join(lines))
        if micro_batches:
            print(f"  largest micro-batches (tokens): {micro_batches}")
        plan["command"] = "python benchmarks/plan_check.py " + " ".join(sys.argv[1:])
        rows.append(plan)
    print("\n".join(summary(rows)))
    if args.out:
        existing = json.loads(args.out.read_text()) if args.out.exists() else []
        args.out.write_text(json.dumps(existing + rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
