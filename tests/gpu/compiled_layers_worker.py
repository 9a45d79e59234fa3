"""Compiled decoder layers on one GPU (run under torchrun by test_compiled_gpu.py). Writes JSON with:
- the graph breaks dynamo met in the actor's, critic's and reference's passes (log-probs, values, updates);
- the compiled graphs after a warm-up of each pass, and after the same passes over micro-batches of other token
  counts, sequence counts and longest sequences (dynamic shapes: no new graph);
- the largest and mean log-prob differences between the compiled and the eager (`force_eager`) actor on the same
  batch."""

import json
import sys

import torch
from torch._dynamo.utils import counters

from megarl.config.schema import MegatronConfig, OptimConfig
from megarl.models.packing import pack_micro_batches
from megarl.models.roles import build_actor, build_critic, build_reference
from megarl.process_exit import exit_process
from parallel import topology


def micro_batches(seed: int, lengths: list[list[int]]) -> tuple[list[torch.Tensor], list[list[int]]]:
    generator = torch.Generator().manual_seed(seed)
    sequences, groups = [], []
    for group in lengths:
        groups.append(list(range(len(sequences), len(sequences) + len(group))))
        sequences += [torch.randint(1, 1000, (length,), generator=generator) for length in group]
    return sequences, groups


def loss(output, batch):
    return output.float().square().mean(), {}


def passes(actor, critic, reference, sequences, groups) -> None:
    actor.logprobs(sequences, groups)
    reference.logprobs(sequences, groups)
    critic.values(sequences, groups)
    device = actor.device
    actor.train_step(pack_micro_batches(sequences, groups, device), loss)
    critic.train_step(pack_micro_batches(sequences, groups, device), loss)


def main():
    model_dir, out = sys.argv[1:3]
    topology.init_distributed(timeout_s=300)
    topology.init_model_parallel()
    optim = OptimConfig(lr=1e-6, weight_decay=0.0)
    actor = build_actor(model_dir, MegatronConfig(), optim, total_steps=8, bf16=True)
    critic = build_critic(model_dir, MegatronConfig(), optim, total_steps=8, bf16=True)
    reference = build_reference(model_dir, MegatronConfig(), bf16=True)
    warm_up = micro_batches(0, [[300, 200, 120], [250, 90]])
    passes(actor, critic, reference, *warm_up)
    graphs_warm = counters["stats"]["unique_graphs"]
    for seed, lengths in enumerate([[[700, 33, 64, 5]], [[17, 18, 19, 20, 21, 22, 23], [511, 3]], [[1024]]], 1):
        passes(actor, critic, reference, *micro_batches(seed, lengths))
    graphs_after = counters["stats"]["unique_graphs"]
    sequences, groups = micro_batches(9, [[400, 300, 60], [350, 10]])
    compiled = torch.cat(actor.logprobs(sequences, groups)["logprobs"])
    with torch.compiler.set_stance("force_eager"):
        eager = torch.cat(actor.logprobs(sequences, groups)["logprobs"])
    diff = (compiled - eager).abs()
    result = {"graph_breaks": sum(counters["graph_break"].values()), "graphs_after_warm_up": graphs_warm,
              "graphs_after_new_shapes": graphs_after, "logprob_max_abs_diff_vs_eager": diff.max().item(),
              "logprob_mean_abs_diff_vs_eager": diff.mean().item()}
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    exit_process(main())
