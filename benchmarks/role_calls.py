"""The training-side role calls of a PPO recipe (actor log-prob, reference, critic values, both updates), timed
one after another as in a step, on random responses of about the full length (random weights): no engine and
no rollout, so a change to the trainer's passes is measured without generation's spread. With `--eager-layers`
the decoder layers run eagerly instead of compiled (megarl/models/compiled_layer.py), for an A/B on one machine.

    torchrun --nproc-per-node 1 benchmarks/role_calls.py --recipe recipes/qwen2_5_0_5b_ppo_gsm8k.yaml \\
        --shape qwen2.5-0.5b --out r.json [--eager-layers] [--versus KEY=VALUE ...] [--profile DIR]

Each call's time is the median over `--rounds` rounds (after one warm-up round that compiles). `--versus` builds a
second actor, critic and reference with those overrides and times their calls in turn with the first set's, round by
round: an A/B in one process (two runs, even on one machine, differed by up to a tenth). `--profile DIR` records one
more round of the first set with torch's profiler, to DIR/rank_00000.json (benchmarks/trace_summary.py reads it), beside
a real step's `trainer.profile_steps` trace.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def responses_batch(cfg, vocab: int):
    """The recipe's batch of prompts of 120 to 199 tokens and responses of the response length minus 0 to 4 × 37
    tokens (both within the recipe's lengths), random ids below 1000; and random advantages on the responses."""
    from megarl.rollout.base import Response
    from megarl.rollout.batch import prompt_batch, with_responses

    generator = torch.Generator().manual_seed(0)
    count, ids = cfg.data.train_batch_size, min(1000, vocab)
    prompts = [torch.randint(1, ids, (min(120 + 8 * i % 80, cfg.data.max_prompt_length),), generator=generator).tolist()
               for i in range(count)]
    lengths = [max(1, cfg.data.max_response_length - (i % 5) * 37) for i in range(count)]
    responses = [[Response(torch.randint(1, ids, (n,), generator=generator).tolist(), [0.0] * n, "length")]
                 for n in lengths]
    batch = with_responses(prompt_batch({"prompt_ids": prompts}), responses)
    advantages = torch.randn(batch["responses"].shape, generator=generator) * batch["response_mask"]
    return batch, advantages


def timed(fn) -> float:
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def spawn_roles(pool, cfg, suffix: str = "", beside=None) -> dict:
    """An actor, a critic and a reference built from `cfg` (their role names end in `suffix`), sharing their GPU's
    cached blocks as spawn_roles places them (and with the roles of `beside`, an actor's handle, in an A/B)."""
    from megarl.workers.actor import ActorWorker
    from megarl.workers.critic import CriticWorker
    from megarl.workers.groups import ActorGroup, CriticGroup, ReferenceGroup
    from megarl.workers.inputs import actor_inputs, critic_inputs, reference_inputs
    from megarl.workers.reference import ReferenceWorker

    actor = ActorGroup(pool.spawn("actor" + suffix, ActorWorker, actor_inputs(cfg, total_steps=100),
                                  *((beside,) if beside is not None else ())))
    return {"actor": actor,
            "critic": CriticGroup(pool.spawn("critic" + suffix, CriticWorker, critic_inputs(cfg, total_steps=100),
                                             actor.handle)),
            "ref": ReferenceGroup(pool.spawn("ref" + suffix, ReferenceWorker, reference_inputs(cfg), actor.handle))}


def with_inputs(roles: dict, batch, advantages):
    """`batch` with what the calls read: old and reference log-probs, values, advantages and returns."""
    from parallel.batch import Batch

    batch = batch.union(roles["actor"].compute_log_prob(batch)).union(Batch({"advantages": advantages,
                                                                             "returns": advantages}))
    return batch.union(roles["ref"].compute_ref_log_prob(batch)).union(roles["critic"].compute_values(batch))


def calls_of(roles: dict, batch) -> dict:
    return {"old_log_prob": lambda: roles["actor"].compute_log_prob(batch),
            "ref": lambda: roles["ref"].compute_ref_log_prob(batch),
            "values": lambda: roles["critic"].compute_values(batch),
            "update_actor": lambda: roles["actor"].update_actor(batch),
            "update_critic": lambda: roles["critic"].update_critic(batch)}


def timed_rounds(sets: dict[str, dict], rounds: int) -> dict[str, dict[str, list[float]]]:
    """Each set's calls one after another, the sets in turn, for a warm-up round and `rounds` timed ones."""
    times = {label: {name: [] for name in calls} for label, calls in sets.items()}
    for round_ in range(rounds + 1):
        for label, calls in sets.items():
            for name, call in calls.items():
                seconds = timed(call)
                if round_:
                    times[label][name].append(seconds)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", type=Path, required=True)
    parser.add_argument("--shape", required=True, help="a megarl.models.shapes.SHAPES name (random weights)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--eager-layers", action="store_true", help="decoder layers uncompiled")
    parser.add_argument("--profile", type=Path, help="record a last, untimed round's trace in this directory")
    parser.add_argument("--set", nargs="*", default=[], help="more recipe overrides")
    parser.add_argument("--versus", nargs="*", default=[],
                        help="overrides of a second set of roles, timed in turn with the first (an A/B)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    import megarl.models.compiled_layer as compiled_layer
    from megarl.config import load_config
    from megarl.models.init_model import write_model
    from megarl.models.shapes import SHAPES
    from megarl.placement import MAIN_POOL, start_workers

    if args.eager_layers:
        compiled_layer.compiles_layers = lambda config: False
    model = write_model(args.shape, Path(tempfile.mkdtemp()) / "model",
                        dtype=torch.bfloat16 if torch.cuda.is_available() else torch.float32)
    cfg = load_config(args.recipe, [f"model.path={model}", *args.set])
    batch, advantages = responses_batch(cfg, SHAPES[args.shape]["vocab_size"])
    with start_workers(cfg) as cluster:
        pool = cluster[MAIN_POOL]
        roles = spawn_roles(pool, cfg)
        batch = with_inputs(roles, batch, advantages)
        sets = {"base": calls_of(roles, batch)}
        if args.versus:
            versus = load_config(args.recipe, [f"model.path={model}", *args.set, *args.versus])
            sets["versus"] = calls_of(spawn_roles(pool, versus, "_versus", roles["actor"].handle), batch)
        times = timed_rounds(sets, args.rounds)
        if args.profile:
            from parallel.worker import Worker

            roles["actor"].handle.call(Worker.start_profile, "torch")
            for call in sets["base"].values():
                call()
            roles["actor"].handle.call(Worker.stop_profile, str(args.profile))
    medians = {label: {name: sorted(ts)[len(ts) // 2] for name, ts in calls.items()} for label, calls in times.items()}
    row = {"date": datetime.date.today().isoformat(), "commit": os.environ.get("MEGARL_COMMIT", "unknown"),
           "machine": os.environ.get("MEGARL_MACHINE", "unknown"), "what": "role-calls", "recipe": str(args.recipe),
           "command": "torchrun --nproc-per-node 1 benchmarks/role_calls.py " + " ".join(sys.argv[1:]),
           "model_shape": args.shape, "layers": "eager" if args.eager_layers else "compiled",
           "batch": cfg.data.train_batch_size, "response_len": cfg.data.max_response_length,
           "call_s_median": medians["base"], "call_s": times["base"]}
    if args.versus:
        row["versus"] = {"overrides": args.versus, "call_s_median": medians["versus"], "call_s": times["versus"]}
    print(json.dumps(medians))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps([row], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
