"""Parallel layouts' views of a model (one layout or several in one launch), run under torchrun by test_layouts.py
(CPU, fp32) and tests/gpu/test_models_gpu.py (bf16).

usage: torchrun --nproc-per-node N dist_worker.py MODEL_DIR OUT_JSON --tp T --pp P --cp C [--bf16] [--length-scale K]
                 [--and MODEL_DIR OUT_JSON --tp T ...]   (several layouts in one launch, one after another)
Rank 0 writes: log-probs, entropy and values of fixed sequences, actor and critic gradient norms of one
step, log-probs after it, max |Δ| against HF transformers in fp32 (and, in bf16 runs, HF's own bf16 error
as the yardstick), the export round trip, packed vs padded.
"""

import argparse
import json
import sys
from typing import Callable

import torch
import torch.distributed as dist
from megatron.core import parallel_state

from megarl.algorithms import compute_policy_loss, compute_value_loss
from megarl.config.schema import MegatronConfig, OptimConfig
from megarl.models.compiled_layer import compiles_layers
from megarl.models.logprobs import vocab_parallel_logprobs_and_entropy
from megarl.models.packing import pack_micro_batches
from megarl.models.roles import build_actor, build_critic, build_reference
from megarl.process_exit import exit_process
from parallel import cpu_compat, topology
from tests.helpers import split_jobs

BASE_LENGTHS = (9, 14, 6, 11, 8, 13, 7, 10)
PROMPT = 3
MICRO_BATCHES = [[0, 1], [2, 3], [4, 5], [6, 7]]


def sequences(vocab: int, lengths) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1234)
    return [torch.randint(0, vocab, (n,), generator=generator) for n in lengths]


def response_masks(lengths) -> list[torch.Tensor]:
    # Next-token positions ≥ PROMPT-1 predict response tokens.
    return [(torch.arange(n - 1) >= PROMPT - 1).float() for n in lengths]


def my_micro_batches() -> list[list[int]]:
    dp, rank = parallel_state.get_data_parallel_world_size(), parallel_state.get_data_parallel_rank()
    return MICRO_BATCHES[rank::dp]


def packed(seqs, indices, fields, device):
    """This rank's micro-batches (`indices`: sample numbers each) packed as the roles pack theirs."""
    return pack_micro_batches(seqs, indices, device, fields)


def hf_logprobs(model_dir, seqs, dtype, device):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)
    out = []
    with torch.no_grad():
        for seq in seqs:
            seq = seq.to(device)
            logits = hf(seq[None]).logits[0, :-1].float()
            out.append(torch.log_softmax(logits, -1).gather(-1, seq[1:, None]).squeeze(-1).cpu())
    del hf
    return out


def layout_parser() -> argparse.ArgumentParser:
    """MODEL_DIR OUT_JSON --tp T --pp P --cp C [--ep E]: what the layout workers take (E: expert parallelism)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--cp", type=int, default=1)
    parser.add_argument("--ep", type=int, default=1)
    return parser


def run_each_layout(parser: argparse.ArgumentParser, run_one: Callable[[argparse.Namespace], dict],
                    seed: int = 7) -> None:
    """`run_one` for each job of the command line (`MODEL_DIR OUT --tp T ... [--and MODEL_DIR OUT ...]`) in turn,
    each on a megatron mesh of its own built and torn down around it over the one default group, and its result
    written by rank 0 to its OUT. One launch for several layouts spares each further layout the process start-up
    (torch, megatron and transformers imports: ~12 s on the CI's CPUs)."""
    cpu_compat.enable()  # a CPU test: megatron through the CPU shim
    topology.init_distributed(timeout_s=300)
    for argv in split_jobs(sys.argv[1:]):
        args = parser.parse_args(argv)
        topology.init_model_parallel(tp=args.tp, pp=args.pp, cp=args.cp, ep=args.ep, seed=seed)
        result = run_one(args)
        if dist.get_rank() == 0:
            with open(args.out, "w") as f:
                json.dump(result, f)
        dist.barrier()
        parallel_state.destroy_model_parallel()
    topology.destroy()


def main():
    parser = layout_parser()
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--length-scale", type=int, default=1)
    parser.add_argument("--transformer-impl", default="auto", help="actor.megatron.transformer_impl")
    run_each_layout(parser, layout_result)


def layout_result(args: argparse.Namespace) -> dict:
    """This layout's numbers (rank 0's are the ones written)."""
    lengths = [n * args.length_scale for n in BASE_LENGTHS]
    megatron = MegatronConfig(tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp,
                              context_parallel_size=args.cp, transformer_impl=args.transformer_impl)
    optim = OptimConfig(lr=1e-3, weight_decay=0.0, clip_grad=1e9)
    actor = build_actor(args.model_dir, megatron, optim, total_steps=1, bf16=args.bf16)
    seqs = sequences(actor.bridge.hf_config.vocab_size, lengths)
    before = actor.logprobs(seqs, MICRO_BATCHES, with_entropy=True)
    layer = first_layer(actor)
    result = {"logprobs": [t.tolist() for t in before["logprobs"]], "entropy": [t.tolist() for t in before["entropy"]],
              "core_attention": type(layer.self_attention.core_attention).__name__,
              "rope_fusion": layer.config.apply_rope_fusion, "compiled_layers": compiles_layers(layer.config)}
    result.update(hf_comparison(args.model_dir, actor, seqs, before["logprobs"], args.bf16))
    if args.pp == 1 and args.cp == 1:  # the padded computation: one right-padded batch, no packing
        result["packed_vs_padded"] = packed_vs_padded(actor, seqs, before["logprobs"])
    masks = response_masks(lengths)
    total_tokens = float(sum(m.sum() for m in masks))
    advantages = [torch.linspace(-1, 1, n - 1) * (1 if i % 2 else -1) for i, n in enumerate(lengths)]
    fields = {"old": before["logprobs"], "adv": advantages, "mask": masks}

    def actor_loss(logits, batch):
        logprobs, _ = vocab_parallel_logprobs_and_entropy(logits, batch.labels, with_entropy=False)
        f = batch.token_fields
        pg_loss, *_ = compute_policy_loss(f["old"], logprobs, f["adv"], f["mask"], batch_num_tokens=total_tokens)
        return pg_loss, {"pg_loss": pg_loss}

    step = actor.train_step(packed(seqs, my_micro_batches(), fields, actor.device), actor_loss)
    result["actor_grad_norm"] = step["grad_norm"]
    if dist.get_world_size() == 1 and not args.bf16:  # activation recomputation changes memory, not gradients
        recomputed = build_actor(args.model_dir, MegatronConfig(recompute_granularity="full"), optim, total_steps=1)
        batches = packed(seqs, my_micro_batches(), fields, actor.device)
        result["recompute_grad_norm"] = recomputed.train_step(batches, actor_loss)["grad_norm"]
        del recomputed
    result["logprobs_after"] = [t.tolist() for t in actor.logprobs(seqs, MICRO_BATCHES)["logprobs"]]
    device = actor.device
    del actor
    result.update(critic_result(args, megatron, optim, seqs, masks, device))
    result.update(reference_result(args, megatron, seqs, before["logprobs"]))
    result["lengths"] = lengths
    return result


def first_layer(role):
    """The first transformer layer of this rank's first model chunk."""
    from megatron.core.utils import unwrap_model

    return unwrap_model(role.chunks[0]).decoder.layers[0]


def hf_comparison(model_dir, actor, seqs, logprobs, bf16: bool) -> dict:
    """On rank 0: the export round trip, and max and mean |Δ| of the log-probs against HF transformers (in bf16
    runs also HF's own bf16 error, the yardstick). Every rank takes part in the export."""
    hf_names = {name: tensor.cpu() for name, tensor in actor.export_hf()}
    if dist.get_rank() != 0:
        return {}
    from safetensors.torch import load_file

    original = load_file(f"{model_dir}/model.safetensors")
    result = {"export_exact": sorted(original) == sorted(hf_names) and all(
        torch.equal(original[k], hf_names[k]) for k in original)}
    reference = hf_logprobs(model_dir, seqs, torch.float32, actor.device)
    mine = [lp.cpu() for lp in logprobs]
    result["hf_max_abs_diff"] = max((a - b).abs().max().item() for a, b in zip(mine, reference))
    result["hf_mean_abs_diff"] = float(torch.cat([(a - b).abs() for a, b in zip(mine, reference)]).mean())
    if bf16:
        hf_bf16 = hf_logprobs(model_dir, seqs, torch.bfloat16, actor.device)
        result["hf_bf16_max_abs_diff"] = max((a - b).abs().max().item() for a, b in zip(hf_bf16, reference))
        result["hf_bf16_mean_abs_diff"] = float(torch.cat([(a - b).abs() for a, b in zip(hf_bf16, reference)]).mean())
    return result


def packed_vs_padded(actor, seqs, logprobs) -> float:
    """max |Δ| between the packed log-probs and those of one right-padded batch."""
    ids = torch.zeros(len(seqs), max(len(seq) for seq in seqs), dtype=torch.long, device=actor.device)
    for i, seq in enumerate(seqs):
        ids[i, : len(seq)] = seq
    with torch.no_grad():
        logits = actor.chunks[0](input_ids=ids, position_ids=None, attention_mask=None)
    labels = torch.cat([ids[:, 1:], torch.zeros_like(ids[:, :1])], dim=1)
    padded, _ = vocab_parallel_logprobs_and_entropy(logits, labels, with_entropy=False)
    return max((padded[i, : len(seq) - 1] - logprobs[i]).abs().max().item() for i, seq in enumerate(seqs))


def critic_result(args, megatron, optim, seqs, masks, device) -> dict:
    """The critic's values and the gradient norm of one value-loss step."""
    critic = build_critic(args.model_dir, megatron, optim, total_steps=1, seed=3, bf16=args.bf16)
    values = critic.values(seqs, MICRO_BATCHES)
    returns = [torch.full((len(seq) - 1,), 0.5) for seq in seqs]
    total_tokens = float(sum(m.sum() for m in masks))

    def critic_loss(output, batch):
        f = batch.token_fields
        vf_loss, _ = compute_value_loss(output.squeeze(-1), f["returns"], f["values"], f["mask"], 0.2,
                                        batch_num_tokens=total_tokens)
        return vf_loss, {}

    fields = {"returns": returns, "values": values, "mask": masks}
    grad_norm = critic.train_step(packed(seqs, my_micro_batches(), fields, device), critic_loss)["grad_norm"]
    return {"values": [t.tolist() for t in values], "critic_grad_norm": grad_norm}


def reference_result(args, megatron, seqs, logprobs) -> dict:
    """The reference's max |Δ| from the actor's first log-probs (and, on a GPU, the bytes it leaves there)."""
    reference = build_reference(args.model_dir, megatron, bf16=args.bf16)
    result = {}
    if torch.cuda.is_available():
        result["reference_offloaded_gpu_bytes"] = sum(
            t.numel() * t.element_size() for chunk in reference.chunks for t in chunk.parameters() if t.is_cuda
        )
    ref_logprobs = reference.logprobs(seqs, MICRO_BATCHES)["logprobs"]
    result["reference_max_abs_diff"] = max((a - b).abs().max().item() for a, b in zip(ref_logprobs, logprobs))
    return result

if __name__ == "__main__":
    exit_process(main())
