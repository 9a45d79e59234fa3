"""Run under torchrun by test_sync.py: train a megatron actor one step (TP/PP layout from the arguments), stream
its weights into transformers rollout engines of --rollout-tp ranks, generate, and compare the engines' log-probs
and weights with the trainer's. Rank 0 writes the JSON. Several layouts run one after another in one launch:
`MODEL_DIR OUT --tp T ... [--and MODEL_DIR OUT --tp T ...]` (tests/megarl/models/dist_worker.py's run_each_layout)."""

import torch
import torch.distributed as dist
from megatron.core import parallel_state

from megarl.config.schema import MegatronConfig, OptimConfig
from megarl.models.bridge import load_hf_config
from megarl.models.logprobs import vocab_parallel_logprobs_and_entropy
from megarl.models.packing import pack_sequences
from megarl.models.roles import build_actor
from megarl.models.to_hf import AttentionShape, megatron_to_hf
from megarl.process_exit import exit_process
from megarl.rollout import SamplingParams
from megarl.rollout.transformers_engine import TransformersEngine
from parallel.engines import place_engines
from parallel.reshard import WeightStreamer
from tests.megarl.models.dist_worker import layout_parser, run_each_layout


def main():
    parser = layout_parser()
    parser.add_argument("--rollout-tp", type=int, default=1)
    parser.add_argument("--bucket-bytes", type=int, default=4096)
    run_each_layout(parser, sync_result, seed=1)


PROMPTS = [[5, 17, 33, 2, 9], [40, 41, 42]]


def sync_result(args) -> dict:
    """This layout's sync, as rank 0 reports it."""
    actor = trained_actor(args)
    placement = place_engines(args.tp, args.rollout_tp)
    slot, slots = placement.slot, placement.slots
    engine = TransformersEngine(args.model_dir, engine_ranks=slot.engine_ranks, group=placement.group)
    hf_config = load_hf_config(args.model_dir)
    attention, tied = AttentionShape.of(hf_config), bool(getattr(hf_config, "tie_word_embeddings", False))
    streamer = WeightStreamer(actor.named_parameters, lambda n, t: megatron_to_hf(n, t, attention, tied), slot, slots,
                              pp_group=parallel_state.get_pipeline_model_parallel_group(),
                              bucket_bytes=args.bucket_bytes)
    held_before = engine.held_bytes()
    engine.release_memory()
    held_released = engine.held_bytes()
    engine.resume_memory(["weights"])
    stats = streamer.sync(engine.load_weights)
    engine.resume_memory(["kv_cache"])
    everything = [None] * dist.get_world_size()
    dist.all_gather_object(everything, generated(engine, slot.engine))
    owners = [e for e in everything if e["responses"] is not None]
    result = compared_with_the_trainer(actor, owners)
    result.update({
        "engines": sorted({e["engine"] for e in everything}), "owners": len(owners),
        "slot": [s.engine_rank for s in slots],
        "finish_reasons": sorted({r[2] for o in owners for rs in o["responses"] for r in rs}),
        "held_before": held_before, "held_released": held_released,
        "bytes_received": stats.bytes_received, "buckets": stats.buckets, "tensors": stats.tensors,
        "peak_extra_bytes": stats.peak_extra_bytes,
    })
    return result


def trained_actor(args):
    """The actor after one update, so the engine's weights on disk are stale and only a correct sync can match it."""
    megatron = MegatronConfig(tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp)
    actor = build_actor(args.model_dir, megatron, OptimConfig(lr=1e-2, weight_decay=0.0), total_steps=1)

    def loss_fn(logits, packed):
        logprobs, _ = vocab_parallel_logprobs_and_entropy(logits, packed.labels)
        return -logprobs.float().mean(), {}

    actor.train_step([pack_sequences([torch.arange(3, 40) % 128, torch.arange(50, 70)])], loss_fn)
    return actor


def generated(engine, engine_index: int) -> dict:
    """An owner's responses to PROMPTS and its weights (None on the other ranks of its engine)."""
    params = SamplingParams(n=2, temperature=1.0, max_new_tokens=6, seed=11 + engine_index)
    local = {"engine": engine_index, "responses": None, "weights": None}
    if engine.is_owner:
        responses = engine.generate(PROMPTS, params)
        local["responses"] = [[(r.token_ids, r.logprobs, r.finish_reason) for r in rs] for rs in responses]
        local["weights"] = {n: p.detach().clone() for n, p in engine.model.named_parameters()}
    return local


def compared_with_the_trainer(actor, owners) -> dict:
    """The engines' log-probs against the trainer's on what they sampled, and their weights against its export."""
    exported = {name: tensor.clone() for name, tensor in actor.export_hf()}
    sequences, rollout_lps = [], []
    for owner in owners:
        for prompt, responses in zip(PROMPTS, owner["responses"]):
            for tokens, logprobs, _ in responses:
                sequences.append((prompt, tokens))
                rollout_lps.append(logprobs)
    full = [torch.tensor(p + t) for p, t in sequences]
    trainer = actor.logprobs(full, [list(range(len(full)))])["logprobs"]
    diffs = [abs(a - b) for (p, t), lp, tr in zip(sequences, rollout_lps, trainer)
             for a, b in zip(lp, tr[len(p) - 1:].tolist())]
    weights_exact = all(
        name in owner["weights"] and torch.equal(owner["weights"][name], tensor)
        for owner in owners for name, tensor in exported.items()
    )
    return {"logprob_max_abs_diff": max(diffs), "tokens": len(diffs), "weights_exact": weights_exact,
            "weight_names": len(exported)}

if __name__ == "__main__":
    exit_process(main())
