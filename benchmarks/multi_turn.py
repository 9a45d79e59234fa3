"""Multi-turn rollouts with tool calls against single-turn rollouts of the same length, on one engine (issue #44).

Random weights never write a tool call, so the model is scripted. Its layers' output projections (attention's o_proj,
the MLP's down_proj) are zero, so the last hidden state is the current token's embedding, and its output rows map each
token of a chain to the next: from the end of the generation prompt (and of every tool message) the model writes
--filler distinct tokens, then `<tool_call>`, one token holding the call's JSON (the python tool running --code in the
sandbox) and `</tool_call>` (added to the tokenizer, one token each, so that a turn stops at its call). Every matmul
keeps the shape's size, so generating and training cost what they cost on random weights of the shape.

Two runs of the recipe under torchrun with that model, the same batch and sampling:
1. `multi_turn`: `rollout.multi_turn` with the python tool and --turns assistant turns, each ending in a call (every
   trajectory finishes at max_turns with --turns − 1 tool results read back);
2. `single_turn`: `multi_turn` off, responses of exactly the model tokens a trajectory of run 1 has (after
   `</tool_call>` the chain starts over; there is no end of turn in it).
Per run, medians over the steps after the first: step, generation and tools seconds, trajectories/s of the step and
of generation, and model tokens/s of generation; the row's `multi_vs_single` is the ratio of the generation
throughputs (the tool messages are extra tokens in run 1's training sequences, not counted as generated).

    python benchmarks/multi_turn.py --recipe recipes/qwen3_0_6b_grpo_gsm8k.yaml --shape qwen2.5-0.5b --steps 6 \\
        --out $OUT/multi_turn.json --set actor.megatron.tensor_model_parallel_size=1 ...
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
from pathlib import Path

from rl_memory import append_row
from rl_step import model_path, overrides, prepare_data, recipe_run_parser, run_steps
from rollout_pool import measured, run_summary

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
CALL_TOKENS = 3  # <tool_call>, the call's JSON, </tool_call>


def script_model(model_dir: Path, filler: int, code: str) -> None:
    """Rewrite the checkpoint in `model_dir` (and its tokenizer) into the chain caller described above."""
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    from megarl.agent.messages import ToolMessages

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    base_vocab = len(tokenizer)
    call = json.dumps({"name": "python", "arguments": {"code": code}})
    tokenizer.add_tokens([CALL_OPEN, call, CALL_CLOSE])
    tokenizer.save_pretrained(model_dir)
    chain_end = tokenizer.convert_tokens_to_ids([CALL_OPEN, call, CALL_CLOSE])
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "?"}], add_generation_prompt=True,
                                           tokenize=False)
    starts = {tokenizer(prompt, add_special_tokens=False)["input_ids"][-1], ToolMessages(tokenizer).ids(["0"])[-1]}
    added = set(tokenizer.get_added_vocab().values())  # <|im_start|> and the like: not filler
    usable = [i for i in range(base_vocab) if i not in starts and i not in added]
    if filler > len(usable):
        raise SystemExit(f"--filler {filler}: the tokenizer has {len(usable)} tokens to write distinct filler with")
    chain = usable[:filler] + chain_end
    successor = {t: u for t, u in zip(chain, chain[1:])} | {chain[-1]: chain[0]} | {s: chain[0] for s in starts}
    model = Qwen2ForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if model.config.tie_word_embeddings:
        model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())
        model.config.tie_word_embeddings = False
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        inputs = torch.tensor(list(successor))
        last_hidden = model.model.norm(model.model.embed_tokens.weight[inputs])
        rows = model.lm_head.weight
        rows.zero_()
        # Random embeddings are near-orthogonal: token t's successor scores 40, every other token within a few units.
        for hidden, t in zip(last_hidden, successor.values()):
            rows[t] += 40.0 * hidden / hidden.square().sum()
    model.to(torch.bfloat16).save_pretrained(model_dir)


def summary(steps: list[dict], trajectories: int, model_tokens: int) -> dict:
    row = run_summary(steps)
    gen_s = row["phases_s"]["gen"]
    row.update({"trajectories_per_s_step": trajectories / row["step_s_median"],
                "trajectories_per_s_gen": trajectories / gen_s,
                "gen_model_tokens_per_s": trajectories * model_tokens / gen_s,
                "gen_s_per_step": [s["timing_s/gen"] for s in steps],
                "response_length_mean": statistics.median([s["response_length/mean"] for s in steps])})
    return row


def multi_turn_checks(steps: list[dict], turns: int) -> dict:
    """The scripted trajectories did what they were made to do: every turn a call that ran."""
    seen = {"assistant_turns": min(s["multi_turn/assistant_turns/mean"] for s in steps),
            "finish_max_turns": min(s["multi_turn/finish/max_turns"] for s in steps),
            "calls_per_sample": min(s["tool/calls_per_sample"] for s in steps),
            "tool_errors": max(s["tool/errors"] + s["tool/timeouts"] for s in steps),
            "tools_share_of_step": statistics.median([s["timing_s/tools"] / s["timing_s/step"] for s in steps]),
            "tools_share_of_gen": statistics.median([s["timing_s/tools"] / s["timing_s/gen"] for s in steps]),
            "tool_latency_s": statistics.median([s["tool/latency_s"] for s in steps])}
    if (seen["assistant_turns"], seen["finish_max_turns"], seen["calls_per_sample"], seen["tool_errors"]) != (
            turns, 1.0, turns - 1, 0):
        raise SystemExit(f"the scripted model did not call the tool every turn: {seen}")
    return seen


def machine_fields(cfg) -> dict:
    """The card and the actor's layer implementation the row was measured with."""
    import torch

    return {"card": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", "model_path": model_path(cfg)}


def main() -> int:
    parser = recipe_run_parser(__doc__, steps=6, work="/tmp/multi_turn")
    parser.add_argument("--turns", type=int, default=3, help="assistant turns per trajectory, each ending in a call")
    parser.add_argument("--filler", type=int, default=200, help="tokens a turn writes before its call")
    parser.add_argument("--code", default="print(sum(i * i for i in range(10**5)))", help="the program each call runs")
    parser.add_argument("--layers", type=int, help="fewer layers than the shape has (a quick check)")
    args = parser.parse_args()
    args.profile_step = None

    from megarl.config import load_config

    model = args.work / f"{args.shape}-{args.layers or 'all'}-layers-scripted"
    if not (model / "config.json").exists():
        import torch

        from megarl.models.init_model import write_model

        write_model(args.shape, model, dtype=torch.bfloat16,
                    **({"num_hidden_layers": args.layers} if args.layers else {}))
        script_model(model, args.filler, args.code)
    train = prepare_data(args.data, args.work)
    model_tokens = args.turns * (args.filler + CALL_TOKENS)
    tool_room = 256 * (args.turns - 1)  # each tool message: its template, the program's output
    multi = ["rollout.multi_turn.enable=true", "rollout.multi_turn.tools=[python]",
             f"rollout.multi_turn.max_assistant_turns={args.turns}",
             f"data.max_response_length={model_tokens + tool_room}"]
    single = [f"data.max_response_length={model_tokens}"]
    runs = {}
    for name, extra in (("multi_turn", multi), ("single_turn", single)):
        ov = overrides(args, model, train, args.work / name) + extra
        cfg = load_config(args.recipe, ov)
        steps = measured(run_steps(args, cfg, ov))
        runs[name] = summary(steps, cfg.data.train_batch_size * cfg.rollout.n, model_tokens)
        if name == "multi_turn":
            runs[name].update(multi_turn_checks(steps, args.turns))
        elif runs[name]["response_length_mean"] != model_tokens:
            raise SystemExit(f"single-turn responses are {runs[name]['response_length_mean']} tokens, not "
                             f"{model_tokens}: the chain broke")
    row = {"date": datetime.date.today().isoformat(), "commit": os.environ.get("MEGARL_COMMIT", "unknown"),
           "machine": os.environ.get("MEGARL_MACHINE", "unknown"), "what": "multi-turn", "recipe": str(args.recipe),
           "command": "python benchmarks/multi_turn.py " + " ".join(sys.argv[1:]), "model_shape": args.shape,
           "model": "scripted chain caller (random weights, zero output projections; benchmarks/multi_turn.py)",
           "random_init": True, "backend": cfg.rollout.name, "batch": cfg.data.train_batch_size, "n": cfg.rollout.n,
           "turns": args.turns, "model_tokens_per_trajectory": model_tokens, "tool_code": args.code, **runs}
    row.update(machine_fields(cfg))
    row["multi_vs_single"] = row["multi_turn"]["gen_model_tokens_per_s"] / row["single_turn"]["gen_model_tokens_per_s"]
    return append_row(args.out, row, 0, "")


if __name__ == "__main__":
    sys.exit(main())
