"""Generation a step ahead on GPUs of its own against the recipe as written, on the same GPUs in one run (issue #15):

1. `colocated`: the recipe's engines beside the trainer on all `trainer.n_gpus_per_node` GPUs, in turn;
2. `ahead`: half the GPUs train and half generate (`rollout.enable_resource_pool`, each side's tensor-parallel size
   capped at its half), generation of step t + 1 running while step t trains (`trainer.staleness=1`), with decoupled
   PPO's token-level weights (`algorithm.rollout_correction.rollout_is=token`) unless the recipe sets its own;
3. after both, the engine alone on the rollout half's GPUs, on the step's prompts (n samples each, to full length),
   which is what generation costs the ahead run when nothing overlaps it.

Both runs use Ray, random weights of --shape and a reward that varies with the response (so the weights move and the
lag shows in `rollout_corr/*`). Medians are over the steps after the first (in the ahead run, also before the last,
which has no generation beside it). The row (`what: rollout-pool`) gives each run's step time and tokens/s/GPU (every
GPU the run holds), the ahead run's time waiting for the engines (for the responses, and before the sync), its
training time (every phase after the responses arrived, the weight sync included) and its overlap efficiency,
step ÷ max(generation, training), where 1 is perfect overlap; the cross-pool sync's time and bytes per step; and
the medians of every `rollout_corr/*` metric.

    python benchmarks/rollout_pool.py --recipe recipes/qwen3_0_6b_grpo_gsm8k.yaml --shape qwen3-0.6b --steps 5 \\
        --data data/gsm8k --out $OUT/rollout_pool.json [--set key=value ...]
"""

from __future__ import annotations

import datetime
import os
import statistics
import sys
import time
from pathlib import Path

from recipe_process import finished_run, run_logged

REPO = Path(__file__).resolve().parents[1]
REWARD = f"reward.function={REPO / 'benchmarks/decoded_length_reward.py'}:compute_score"
# What the step does once its responses are there, the sync to the engines included.
TRAINING = ("reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor", "update_weights")


def ahead_overrides(cfg) -> list[str]:
    """The recipe on half its GPUs, the engines on the other half, a step ahead."""
    half = cfg.trainer.n_gpus_per_node // 2
    if half < 1 or cfg.trainer.nnodes != 1:
        raise SystemExit("rollout_pool.py splits one node's trainer.n_gpus_per_node GPUs in two: give it 2 or more")
    # Decoupled PPO against the lag, unless the recipe corrects the rollout its own way.
    correction = [] if cfg.algorithm.rollout_correction.enabled else ["algorithm.rollout_correction.rollout_is=token"]
    return [f"trainer.n_gpus_per_node={half}", "rollout.enable_resource_pool=true", f"rollout.n_gpus_per_node={half}",
            f"actor.megatron.tensor_model_parallel_size={min(cfg.actor.megatron.tensor_model_parallel_size, half)}",
            f"rollout.tensor_model_parallel_size={min(cfg.rollout.tensor_model_parallel_size, half)}",
            "trainer.staleness=1", "rollout.max_logprob_mult_error=null", *correction]


def run(args, ov: list[str], out_dir: Path) -> list[dict]:
    cmd = [sys.executable, "-m", "megarl.train", "--recipe", str(args.recipe), *ov, f"trainer.output_dir={out_dir}"]
    return finished_run(*run_logged(cmd, out_dir, args.time_limit, {"RAY_AUTH_MODE": "disabled"}), out_dir)


def measured(metrics: list[dict], drained: int = 0) -> list[dict]:
    """The steps after the first (which compiles and warms up), less the last `drained`: a step ahead, the last step
    has no generation in flight beside it and is shorter than the rest."""
    last = max((m.get("step", 0) for m in metrics), default=0)
    steps = [m for m in metrics if 1 < m.get("step", 0) <= last - drained]
    if not steps:
        raise SystemExit(f"--steps must leave a step after the first (which compiles and warms up)"
                         f"{' and before the last (which generates nothing ahead)' if drained else ''}")
    return steps


def run_summary(steps: list[dict]) -> dict:

    return {"step_s_median": statistics.median([s["timing_s/step"] for s in steps]),
            "tokens_per_s_per_gpu": statistics.median([s["perf/throughput"] for s in steps]),
            "phases_s": {key.split("/", 1)[1]: statistics.median([s[key] for s in steps])
                         for key in steps[0] if key.startswith("timing_s/") and key != "timing_s/step"}}


def ahead_summary(steps: list[dict], gen_s: float | None) -> dict:
    """The ahead run's overlap: `gen_s`, the engine's time for a step's generation alone (None: not measured)."""

    row = run_summary(steps)
    phases = row["phases_s"]
    training = sum(phases.get(name, 0.0) for name in TRAINING)
    waiting = phases["gen"] + phases.get("sync_wait", 0.0)  # for the responses, and for the engines before the sync
    row.update({"wait_for_gen_s": waiting, "training_s": training, "gen_alone_s": gen_s,
                "overlap_efficiency": row["step_s_median"] / max(gen_s, training) if gen_s else None,
                "sync_s": phases["update_weights"],
                "sync_gb": statistics.median([s["update_weights/bytes_sent_gb"] for s in steps]),
                "rollout_corr": {key: statistics.median([s[key] for s in steps]) for key in steps[0]
                                 if key.startswith("rollout_corr/")}})
    return row


def main() -> int:
    from rl_step import recipe_run_parser

    args = recipe_run_parser(__doc__, steps=5, work="/tmp/rollout_pool").parse_args()  # --set: both runs
    args.profile_step = None  # rl_step.overrides' options that this benchmark does not take

    import torch

    from rl_memory import append_row
    from rl_step import overrides, prepare, prompt_ids, shape_name, standalone_sglang
    from standalone import PLAIN

    from megarl.config import load_config

    args.work.mkdir(parents=True, exist_ok=True)
    model, train = prepare(args, args.work)
    common = [o for o in overrides(args, model, train, args.work) if not o.startswith("trainer.output_dir=")]
    common.append(REWARD)
    cfg = load_config(args.recipe, common)
    split = ahead_overrides(cfg)
    ahead_ov = [*common, *split]
    ahead_cfg = load_config(args.recipe, ahead_ov)
    stamp = int(time.time())
    colocated = measured(run(args, common, args.work / f"colocated-{stamp}"))
    ahead = measured(run(args, ahead_ov, args.work / f"ahead-{stamp}"), drained=1)
    gen_s = None
    if torch.cuda.is_available():  # the engine alone, on the rollout half's GPUs
        prompts = prompt_ids(ahead_cfg, model, train, ahead_cfg.data.train_batch_size)
        gen_s = standalone_sglang(ahead_cfg, model, prompts, {"plain": PLAIN})["plain"]["gen_s"]
    row = {"date": datetime.date.today().isoformat(), "commit": os.environ.get("MEGARL_COMMIT", "unknown"),
           "machine": os.environ.get("MEGARL_MACHINE", "unknown"), "what": "rollout-pool", "recipe": str(args.recipe),
           "command": "python benchmarks/rollout_pool.py " + " ".join(sys.argv[1:]), "model_shape": shape_name(args),
           "gpus_used": cfg.gpus, "backend": cfg.rollout.name, "batch": cfg.data.train_batch_size, "n": cfg.rollout.n,
           "response_len": cfg.data.max_response_length, "colocated": run_summary(colocated),
           "ahead": ahead_summary(ahead, gen_s), "ahead_overrides": split}
    row["ahead_vs_colocated"] = row["ahead"]["tokens_per_s_per_gpu"] / row["colocated"]["tokens_per_s_per_gpu"]
    return append_row(args.out, row, 0, "")


if __name__ == "__main__":
    sys.exit(main())
