"""Run under torchrun on GPUs by test_rollout_gpu.py: a bf16 megatron actor (training TP from --tp) takes one
optimizer step, then SGLang engines of --rollout-tp GPUs colocated with it receive its weights through the
reshard layer. Measures sync time, bytes and extra memory (against SGLang's own full-tensor update and a plain
copy of the same bytes), checks the engine's weights exactly against the trainer's exported HF tensors (SGLang's
weight checker: snapshot of a reference load, poison, sync, compare), memory freed on release, generation,
and the log-prob agreement with the trainer. Rank 0 writes one JSON row."""

import argparse
import json
import os
import shutil
import statistics
import time

import torch
import torch.distributed as dist
from megatron.core import parallel_state

from megarl.config.schema import MegatronConfig, OptimConfig
from megarl.models.bridge import load_hf_config
from megarl.models.hf_files import write_hf_checkpoint
from megarl.models.logprobs import vocab_parallel_logprobs_and_entropy
from megarl.models.packing import pack_sequences
from megarl.models.roles import build_actor
from megarl.models.to_hf import AttentionShape, megatron_to_hf
from megarl.process_exit import exit_process
from megarl.rollout import SamplingParams
from megarl.rollout.gates import logprob_agreement
from megarl.rollout.sglang_engine import SGLangEngine
from parallel import topology
from parallel.engines import place_engines
from parallel.reshard import WeightStreamer

GB = 1e9
START = time.perf_counter()


def progress(what: str) -> None:
    print(f"[rank {os.environ.get('RANK', '0')} +{time.perf_counter() - START:.1f}s] {what}", flush=True)


def free_gb() -> float:
    return torch.cuda.mem_get_info()[0] / GB


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--rollout-tp", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--response-len", type=int, default=256)
    parser.add_argument("--syncs", type=int, default=3)
    parser.add_argument("--weight-check", action="store_true")
    parser.add_argument("--random-init", action="store_true",
                        help="MODEL_DIR holds only config.json: megatron initialises randomly, SGLang loads dummy weights "
                        "(or, with --weight-check, the trainer's exported ones)")
    args = parser.parse_args()

    topology.init_distributed(timeout_s=600)
    topology.init_model_parallel(tp=args.tp)
    rank, world = dist.get_rank(), dist.get_world_size()
    actor = build_actor(args.model_dir, MegatronConfig(tensor_model_parallel_size=args.tp),
                        OptimConfig(lr=1e-5, weight_decay=0.0), total_steps=1, bf16=True,
                        load_weights=not args.random_init)

    def loss_fn(logits, packed):
        logprobs, _ = vocab_parallel_logprobs_and_entropy(logits, packed.labels)
        return -logprobs.float().mean(), {}

    generator = torch.Generator().manual_seed(0)
    vocab = load_hf_config(args.model_dir).vocab_size
    batch = [torch.randint(0, vocab, (512,), generator=generator) for _ in range(4)]
    actor.train_step([pack_sequences(batch, device=actor.device)], loss_fn)  # the engine must get these weights
    progress('trained one step')

    exported_dir = os.path.join(os.path.dirname(args.out), f"exported-tp{args.tp}")
    if args.weight_check:  # SGLang loads the trainer's weights itself: the reference its checker compares with
        exported = actor.export_hf()
        if rank == 0:
            write_hf_checkpoint(((n, t.cpu()) for n, t in exported), exported_dir)
            for name in ("config.json", "generation_config.json"):
                if os.path.exists(os.path.join(args.model_dir, name)):
                    shutil.copy(os.path.join(args.model_dir, name), exported_dir)
        else:
            for _ in exported:
                pass
        dist.barrier()
        progress('exported')

    hf_config = load_hf_config(args.model_dir)
    attention, tied = AttentionShape.of(hf_config), bool(getattr(hf_config, "tie_word_embeddings", False))
    placement = place_engines(args.tp, args.rollout_tp)
    slot, slots, group, engines = placement.slot, placement.slots, placement.group, placement.engine_count
    start = time.perf_counter()
    engine = SGLangEngine(
        exported_dir if args.weight_check else args.model_dir, engine_ranks=slot.engine_ranks,
        local_devices=slot.engine_ranks, group=group, vocab_size=hf_config.vocab_size,
        num_kv_heads=hf_config.num_key_value_heads, mem_fraction_static=0.4, seed=slot.engine,
        engine_kwargs={"attention_backend": "triton", "sampling_backend": "pytorch", "cuda_graph_max_bs_decode": 64,
                       **({"load_format": "dummy"} if args.random_init and not args.weight_check else {})},
    )
    dist.barrier()
    engine_start_s = time.perf_counter() - start
    progress('engine started')
    floor = None
    if args.weight_check:  # the numerical floor: the engine holds the trainer's weights, loaded by SGLang itself
        floor_prompts = [torch.randint(0, vocab, (args.prompt_len,), generator=generator).tolist()
                         for _ in range(args.prompts)]
        floor, _ = generate_and_compare(engine, actor, slot, engines, floor_prompts, args.response_len)
        progress('floor measured')
    if engine.is_owner and args.weight_check:
        assert engine.check_weights("snapshot")[0]  # SGLang's own load of the exported HF tensors
        assert engine.check_weights("reset_tensors")[0]  # poisoned: only a correct sync can restore them

    streamer = WeightStreamer(actor.named_parameters, lambda n, t: megatron_to_hf(n, t, attention, tied), slot, slots,
                              pp_group=parallel_state.get_pipeline_model_parallel_group())
    torch.cuda.synchronize()
    free_with_engine = free_gb()
    engine.release_memory()
    dist.barrier()
    free_released = free_gb()
    engine.resume_memory(["weights"])
    progress('released and resumed weights')
    runs = []
    for _ in range(args.syncs):
        dist.barrier()
        runs.append(streamer.sync(engine.load_weights))
    weight_check = None
    if engine.is_owner and args.weight_check:
        ok, message = engine.check_weights("compare")
        weight_check = "exact" if ok else f"mismatch: {message[:2000]}"
    engine.resume_memory(["kv_cache"])
    everything = [None] * world
    dist.all_gather_object(everything, {"weight_check": weight_check, "sync": [vars(r) for r in runs]})
    progress('synced and checked')

    prompts = [torch.randint(0, vocab, (args.prompt_len,), generator=generator).tolist() for _ in range(args.prompts)]
    agreement, gen_tokens_per_s = generate_and_compare(engine, actor, slot, engines, prompts, args.response_len)
    engine.release_memory()
    progress('generated')

    baseline = measure_baseline(actor, engine, args.syncs)
    progress('baseline measured')
    if rank == 0:
        median = statistics.median(r["seconds"] for r in everything[0]["sync"])
        row = {
            "what": "reshard", "tp": args.tp, "rollout_tp": args.rollout_tp, "world_size": world,
            "engine_start_s": round(engine_start_s, 1), "random_init": args.random_init,
            "sync_s": median, "sync_s_runs": [r["seconds"] for r in everything[0]["sync"]],
            "sync_bytes_received_per_rank": [e["sync"][-1]["bytes_received"] for e in everything],
            "sync_extra_mem_gb": max(e["sync"][-1]["peak_extra_bytes"] for e in everything) / GB,
            "sync_buckets": runs[-1].buckets, "sync_tensors": runs[-1].tensors,
            "weight_check": next((e["weight_check"] for e in everything if e["weight_check"]), None),
            "released_gb": free_released - free_with_engine,
            "gen_tokens_per_s": gen_tokens_per_s,
            "prompts": args.prompts, "prompt_len": args.prompt_len, "response_len": args.response_len,
            "logprob_mult_error": agreement["rollout/logprob_mult_error"],
            "logprob_max_abs_diff": agreement["rollout/logprob_max_abs_diff"],
            "logprob_mult_error_engine_loaded": floor and floor["rollout/logprob_mult_error"],
            "baseline": baseline,
        }
        with open(args.out, "w") as f:
            json.dump(row, f, indent=1)
    engine.shutdown()
    topology.destroy()


def generate_and_compare(engine, actor, slot, engines, prompts, response_len):
    """Every engine samples its share of `prompts`; the trainer scores all responses. Returns the log-prob agreement
    and the generation throughput."""
    params = SamplingParams(n=1, temperature=1.0, max_new_tokens=response_len, ignore_eos=True)
    generated, gen_s = None, 0.0
    if engine.is_owner:
        start = time.perf_counter()
        generated = engine.generate(prompts[slot.engine::engines], params)
        gen_s = time.perf_counter() - start
    everything = [None] * dist.get_world_size()
    dist.all_gather_object(everything, {"gen_s": gen_s, "prompt_index": list(range(slot.engine, len(prompts), engines)),
                                        "responses": [[(r.token_ids, r.logprobs) for r in rs] for rs in generated]
                                        if generated else None})
    owners = [e for e in everything if e["responses"] is not None]
    sequences, rollout_lps, lengths = [], [], []
    for owner in owners:
        for index, responses in zip(owner["prompt_index"], owner["responses"]):
            for tokens, logprobs in responses:
                sequences.append(torch.tensor(prompts[index] + tokens))
                rollout_lps.append(torch.tensor(logprobs))
                lengths.append(len(prompts[index]))
    trainer = actor.logprobs(sequences, [list(range(i, min(i + 8, len(sequences)))) for i in range(0, len(sequences), 8)])
    trainer_lps = [lp[n - 1:].cpu() for lp, n in zip(trainer["logprobs"], lengths)]
    width = max(len(lp) for lp in rollout_lps)
    pad = lambda rows: torch.stack([torch.nn.functional.pad(r.float(), (0, width - len(r))) for r in rows])  # noqa
    mask = pad([torch.ones(len(r)) for r in rollout_lps])
    return logprob_agreement(pad(rollout_lps), pad(trainer_lps), mask), \
        len(sequences) * response_len / max(e["gen_s"] for e in owners)


def measure_baseline(actor, engine, repeats: int) -> dict:
    """verl's way, in the same run and as often as ours: every rank gathers every tensor in full (mbridge's
    export), the owner pushes HF tensors through SGLang's own loader; and a plain device-to-device copy of the
    model's bytes. Skipped, with the reason in the row, where the full model would not fit beside the trainer and the
    resumed engine on every GPU (Qwen3-8B at TP 4 on 80 GB cards): the engine's scheduler would die of it mid-call."""
    engine.resume_memory()
    model_bytes = torch.tensor([sum(p.numel() * p.element_size() for _, p in actor.named_parameters())],
                               dtype=torch.float64, device="cuda")
    dist.all_reduce(model_bytes, group=parallel_state.get_tensor_model_parallel_group())
    free = torch.tensor([free_gb()], dtype=torch.float64, device="cuda")
    dist.all_reduce(free, op=dist.ReduceOp.MIN)
    needed_gb = 1.2 * model_bytes.item() / GB
    if free.item() < needed_gb:
        return {"what": "all-gather full HF tensors on every rank + SGLang load_weights (verl-style)",
                "skipped": f"needs {needed_gb:.1f} GB free on each GPU for the gathered model, {free.item():.1f} free"}
    runs, extras = [], []
    for _ in range(repeats):
        dist.barrier()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        start = time.perf_counter()
        full = [(name, tensor.detach()) for name, tensor in actor.export_hf()]
        if engine.is_owner:
            ok, message = engine.engine.update_weights_from_tensor(full, load_format=None, flush_cache=True)
            assert ok, message
        torch.cuda.synchronize()
        dist.barrier()
        runs.append(time.perf_counter() - start)
        extras.append((torch.cuda.max_memory_allocated() - before) / GB)
        nbytes = sum(t.numel() * t.element_size() for _, t in full)
        del full
    source = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    target.copy_(source)
    torch.cuda.synchronize()
    start = time.perf_counter()
    target.copy_(source)
    torch.cuda.synchronize()
    copy_s = time.perf_counter() - start
    return {"what": "all-gather full HF tensors on every rank + SGLang load_weights (verl-style)",
            "sync_s": statistics.median(runs), "sync_s_runs": runs, "sync_extra_mem_gb": max(extras),
            "model_gb": nbytes / GB, "d2d_copy_s_of_model_bytes": copy_s}


if __name__ == "__main__":
    exit_process(main())
