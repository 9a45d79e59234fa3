"""A LoRA actor in a parallel layout (one or several in one launch), run under torchrun by test_lora.py (CPU, fp32).

usage: torchrun --nproc-per-node N lora_worker.py MODEL_DIR OUT_JSON --tp T --pp P --cp C [--ep E] [--checkpoint DIR]
                 [--targets LAYER ...] [--and MODEL_DIR OUT_JSON --tp T ...]   (several layouts, one after another)
Rank 0 writes: the log-probs of fixed sequences with the adapters as initialised (B = 0), without them, and from
the full model; after setting every B to a fixed layout-independent draw, log-probs and the merged weights' sums;
the parameters the optimizer holds; one PPO step's grad norm and the log-probs after it; whether the frozen base
changed. With --checkpoint it saves a training checkpoint after the step, then loads it into a fresh actor and
reports that actor's log-probs.
"""

from dataclasses import replace

import torch
import torch.distributed as dist
from megatron.core import parallel_state

from megarl.config.schema import LoRAConfig, MegatronConfig, OptimConfig
from megarl.models.checkpoint import load_training_checkpoint, save_training_checkpoint
from megarl.models.roles import build_actor
from megarl.process_exit import exit_process
from tests.megarl.models.dist_worker import (layout_parser, my_micro_batches, packed, response_masks, run_each_layout,
                                             sequences)

LENGTHS = (9, 14, 6, 11, 8, 13, 7, 10)
LORA = LoRAConfig(rank=4, alpha=8.0)


def gathered_logprobs(actor, seqs, adapters=True) -> list[list[float]]:
    """Log-probs of every sequence, gathered from the data-parallel ranks (each computes its micro-batches)."""
    mine = my_micro_batches()
    batches = [[seqs[i] for i in mb] for mb in mine]
    flat = [s for mb in batches for s in mb]
    groups, start = [], 0
    for mb in batches:
        groups.append(list(range(start, start + len(mb))))
        start += len(mb)
    run = actor.logprobs if adapters else actor.base_logprobs
    out = run(flat, groups)["logprobs"] if flat else []
    values = {i: out[k].tolist() for k, i in enumerate(i for mb in mine for i in mb)}
    everything = [None] * parallel_state.get_data_parallel_world_size()
    dist.all_gather_object(everything, values, group=parallel_state.get_data_parallel_group())
    merged = {i: v for part in everything for i, v in part.items()}
    return [merged[i] for i in range(len(seqs))]


def set_adapters_b(actor, seed: int = 7) -> None:
    """Every B drawn whole from a generator seeded by its global name, then cut to this rank's part."""
    import zlib

    for name, layer in actor.named_adapters():
        full = torch.randn(layer.full_shape("lora_B"), generator=torch.Generator().manual_seed(seed + zlib.crc32(
            name.encode()))) * 0.05
        with torch.no_grad():
            layer.lora_B.copy_(layer.local_part("lora_B", full))


def ppo_step(actor, seqs) -> float:
    masks = response_masks(LENGTHS)
    old = gathered_logprobs(actor, seqs)
    fields = {"old": [torch.tensor(v) for v in old], "mask": masks,
              "adv": [torch.linspace(-1, 1, len(m)) for m in masks]}
    batches = packed(seqs, my_micro_batches(), fields, actor.device)
    total = sum(float(m.sum()) for m in masks)

    def loss_fn(logits, batch):
        from megarl.models.logprobs import vocab_parallel_logprobs_and_entropy

        f = batch.token_fields
        logprobs, _ = vocab_parallel_logprobs_and_entropy(logits, batch.labels)
        ratio = torch.exp(logprobs - f["old"])
        return -(ratio * f["adv"] * f["mask"]).sum() / total, {}

    return actor.train_step(batches, loss_fn)["grad_norm"]


def build(model_dir, args, adapters=True):
    megatron = MegatronConfig(tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp,
                              context_parallel_size=args.cp, expert_model_parallel_size=args.ep)
    lora = replace(LORA, target_modules=args.targets) if adapters else None
    return build_actor(model_dir, megatron, OptimConfig(lr=1e-2, weight_decay=0.0), total_steps=4, lora=lora)


def main():
    parser = layout_parser()
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--targets", nargs="+", default=list(LORA.target_modules))
    run_each_layout(parser, lora_result, seed=1)


def lora_result(args) -> dict:
    """This layout's numbers (rank 0's are the ones written)."""
    torch.manual_seed(0)
    seqs = sequences(128, LENGTHS)
    full = build(args.model_dir, args, adapters=False)
    result = {"full_model": gathered_logprobs(full, seqs)}
    del full
    actor = build(args.model_dir, args)
    result["initial"] = gathered_logprobs(actor, seqs)
    result["base"] = gathered_logprobs(actor, seqs, adapters=False)
    set_adapters_b(actor)
    result["adapted"] = gathered_logprobs(actor, seqs)
    result["base_after_b"] = gathered_logprobs(actor, seqs, adapters=False)
    result["trained_parameters"] = sorted(n for c in actor.chunks for n, p in c.named_parameters() if p.requires_grad)
    result["optimizer_numel"] = sum(p.numel() for g in actor.optimizer.param_groups for p in g["params"])
    frozen = {n: p.detach().clone() for c in actor.chunks for n, p in c.named_parameters() if not p.requires_grad}
    merged_before = dict(actor.named_parameters())
    result["merged_names"] = sorted(merged_before)
    result["grad_norm"] = ppo_step(actor, seqs)
    result["after_step"] = gathered_logprobs(actor, seqs)
    result["frozen_changed"] = sorted(n for c in actor.chunks for n, p in c.named_parameters()
                                      if n in frozen and not torch.equal(p.detach(), frozen[n]))
    result["frozen_count"] = len(frozen)
    result["merged_changed"] = sorted(n for n, t in actor.named_parameters() if not torch.equal(t, merged_before[n]))
    if args.checkpoint:
        save_training_checkpoint(actor, args.checkpoint)
        ppo_step(actor, seqs)
        result["second_step"] = gathered_logprobs(actor, seqs)
        restored = build(args.model_dir, args)
        load_training_checkpoint(restored, args.checkpoint)
        result["restored"] = gathered_logprobs(restored, seqs)
        ppo_step(restored, seqs)
        result["restored_second_step"] = gathered_logprobs(restored, seqs)
    return result


if __name__ == "__main__":
    exit_process(main())
