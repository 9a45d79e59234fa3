"""Forward-only passes over packed micro-batches through megatron's pipeline schedules: per-token
log-probs and entropy (actor, reference), values (critic) and sequence scores (reward model), returned per sample
on every rank."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Callable, Sequence

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.pipeline_parallel import get_forward_backward_func
from megatron.core.transformer.module import Float16Module

from megarl.models.logprobs import vocab_parallel_logprobs_and_entropy
from megarl.models.packing import PackedBatch, pack_micro_batches, pipeline_needs_one_length
from megarl.models.router_replay import RoutingReplay

PerToken = Callable[[torch.Tensor, PackedBatch], dict[str, torch.Tensor]]


def run_schedule(model: list, batches: list[PackedBatch], on_output: Callable, forward_only: bool,
                 blocks: CachedBlocks, replay: RoutingReplay | None = None) -> list:
    """megatron's (pipeline) schedule over packed `batches`. On the last stage `on_output(output, batch)`
    returns (loss, data); the schedule returns each micro-batch's data there and nothing elsewhere. `blocks`: the
    process's cached blocks, handed back first if this pass does not fit them. `replay`: the routers take each
    micro-batch's `routed_experts` (router replay)."""
    tokens = {b.input_ids.shape[1] for b in batches}
    if len(tokens) > 1 and pipeline_needs_one_length(model):
        raise ValueError(f"this pass's micro-batches hold {min(tokens)} to {max(tokens)} tokens, but its pipeline "
                         "stages pass activations of one shape (the all-gather MoE token dispatcher, on CPU): pack "
                         "them with one_length (megarl/models/packing.py), or set pipeline_model_parallel_size=1")
    data = iter(batches)
    blocks.before_pass((id(model[0]), forward_only), max(tokens))
    output_dtype = _model_dtype_output(model[0])

    def forward_step(data_iterator, chunk):
        batch = next(data_iterator)
        if replay is not None:
            replay.start(batch.routed_experts)
        output = chunk(input_ids=batch.input_ids, position_ids=None, attention_mask=None,
                       packed_seq_params=batch.packed_seq_params, **output_dtype)
        if replay is not None and not forward_only and batch.routed_experts is not None:
            output = replay.in_backward(output)
        return output, lambda output_tensor: on_output(output_tensor, batch)

    return get_forward_backward_func()(
        forward_step_func=forward_step,
        data_iterator=data,
        model=model,
        num_microbatches=len(batches),
        seq_length=max(tokens),
        micro_batch_size=1,
        forward_only=forward_only,
    )


def _model_dtype_output(chunk) -> dict:
    """megatron's Float16Module (a bf16 model's wrapper) upcasts the last stage's output to float32 by default: for
    the logits a [tokens × V/tp] float32 copy, which the log-prob function then saved for the backward, whose gradient
    came back in float32 too (docs/benchmarks.md has its size and time). Every consumer of the output computes in
    float32 itself (the log-prob function chunk by chunk; values and scores are cast where used), so the output stays
    in the model's dtype."""
    module = chunk
    while not isinstance(module, Float16Module) and isinstance(getattr(module, "module", None), torch.nn.Module):
        module = module.module
    return {"fp32_output": False} if isinstance(module, Float16Module) else {}


class CachedBlocks:
    """torch's cached blocks of one process's GPU and the pass they were shaped for (a model, forward or update, and
    its largest micro-batch). The roles of a process share its allocator, so they share one of these: the actor's,
    given to the roles spawned beside it (megarl/trainer/spawn.py)."""

    def __init__(self) -> None:
        self.shaped_for: tuple[tuple, int] | None = None

    def before_pass(self, pass_kind: tuple, largest_tokens: int) -> None:
        """Hand torch's cached blocks back before a pass they were not shaped for: kept, the blocks of every pass add
        up to far more than any pass's live tensors. Not per micro-batch, nor between the mini-batches of an update:
        emptying waits for the GPU and makes what follows allocate afresh (docs/benchmarks.md has both costs). Within
        a pass the largest micro-batch comes first (token_budget_micro_batches), so the rest fit in its blocks; the
        next pass of the same model and kind with no larger micro-batch fits in them too. (A no-op without CUDA.)"""
        last = self.shaped_for
        if last is None or last[0] != pass_kind or largest_tokens > last[1]:
            torch.cuda.empty_cache()
            self.shaped_for = (pass_kind, largest_tokens)


def run_forward(model, batches: list[PackedBatch], per_token: PerToken, blocks: CachedBlocks,
                replay: RoutingReplay | None = None) -> list[dict[str, list[torch.Tensor]]]:
    """Run `model` (a list of model chunks) over `batches` with no gradient; `per_token(output, batch)` maps the
    last stage's output to [1, local tokens] tensors. Returns, per batch, each key's per-sample tensors
    (true lengths, CP chunks reassembled), identical on every rank."""
    model = model if isinstance(model, list) else [model]
    for chunk in model:
        chunk.eval()
    with torch.no_grad():
        stored = run_schedule(
            model, batches, lambda output, batch: (output.new_zeros(()), per_token(output, batch)), forward_only=True,
            blocks=blocks, replay=replay,
        )
    keys = _keys(stored[0] if stored else None)
    return [_share(batch, stored[i] if stored else None, keys) for i, batch in enumerate(batches)]


def _keys(local: dict[str, torch.Tensor] | None) -> list[str]:
    """`per_token`'s keys (the same for every micro-batch), which only the last pipeline stage has: sent once per
    pass, since an object broadcast waits for the GPU."""
    keys = sorted(local) if local is not None else None
    if parallel_state.get_pipeline_model_parallel_world_size() > 1:
        holder = [keys]
        dist.broadcast_object_list(holder, src=parallel_state.get_pipeline_model_parallel_last_rank(),
                                   group=parallel_state.get_pipeline_model_parallel_group())
        keys = holder[0]
    return keys


def _share(batch: PackedBatch, local: dict[str, torch.Tensor] | None,
           keys: list[str]) -> dict[str, list[torch.Tensor]]:
    """Reassemble CP chunks on the last pipeline stage, then broadcast per-sample values to all stages."""
    total = sum(batch.padded_lengths)
    device = batch.input_ids.device
    flat = torch.empty(len(keys), total, dtype=torch.float32, device=device)
    if local is not None:
        for row, key in enumerate(keys):
            tensor = local[key].float().contiguous()
            if batch.cp_size > 1:
                parts = [torch.empty_like(tensor) for _ in range(batch.cp_size)]
                dist.all_gather(parts, tensor, group=parallel_state.get_context_parallel_group())
                tensor = batch.to_global(parts)
            flat[row] = tensor[0]
    if parallel_state.get_pipeline_model_parallel_world_size() > 1:
        dist.broadcast(flat, src=parallel_state.get_pipeline_model_parallel_last_rank(),
                       group=parallel_state.get_pipeline_model_parallel_group())
    return {key: batch.unpack(flat[row : row + 1]) for row, key in enumerate(keys)}


def compute_sequence_scores(model, sequences: Sequence, micro_batches: Sequence[Sequence[int]], blocks: CachedBlocks,
                            device=None) -> torch.Tensor:
    """[N]: the value head's output at each sample's last token, which has read the whole sequence (a reward
    model's score)."""
    batches = pack_micro_batches(sequences, micro_batches, device, one_length=pipeline_needs_one_length(model))
    results = run_forward(model, batches, lambda values, batch: {"values": values.squeeze(-1)}, blocks)
    return torch.stack([v[-1] for v in _merge(results, micro_batches, len(sequences))["values"]])


def _merge(per_batch: list[dict[str, list[torch.Tensor]]], micro_batches: Sequence[Sequence[int]], count: int):
    merged: dict[str, list] = {}
    for result, indices in zip(per_batch, micro_batches):
        for key, values in result.items():
            slots = merged.setdefault(key, [None] * count)
            for index, value in zip(indices, values):
                slots[index] = value
    return merged


def compute_logprobs(model, sequences: Sequence, micro_batches: Sequence[Sequence[int]], blocks: CachedBlocks,
                     temperature: float = 1.0, with_entropy: bool = False, device=None,
                     routing: Sequence[torch.Tensor] | None = None) -> dict[str, list[torch.Tensor]]:
    """Per sample of length L: "logprobs" [L−1], log p(token t+1 | tokens ≤ t), and "entropy" [L−1] of the
    next-token distribution at each position when `with_entropy`. With `routing` (each sample's routed experts,
    [L−1, MoE layers, top-k]) the routers replay it, and "routing_flips" [L−1] counts, per token, the layers whose
    router would have chosen other experts."""
    model = model if isinstance(model, list) else [model]
    with RoutingReplay(model, measure_flips=True) if routing is not None else nullcontext() as replay:

        def per_token(logits, batch):
            logprobs, entropy = vocab_parallel_logprobs_and_entropy(logits, batch.labels, temperature, with_entropy)
            return {"logprobs": logprobs, **({"entropy": entropy} if with_entropy else {})}

        batches = pack_micro_batches(sequences, micro_batches, device, routing=routing,
                                     one_length=pipeline_needs_one_length(model))
        results = run_forward(model, batches, per_token, blocks, replay)
        if replay is not None:
            flips = replay.flips_over_stages()
            results = [{**result, **_share(batch, {"routing_flips": batch_flips.unsqueeze(0)}, ["routing_flips"])}
                       for result, batch, batch_flips in zip(results, batches, flips)]
    merged = _merge(results, micro_batches, len(sequences))
    return {key: [v[:-1] for v in values] for key, values in merged.items()}


def compute_values(model, sequences: Sequence, micro_batches: Sequence[Sequence[int]], blocks: CachedBlocks,
                   device=None) -> list[torch.Tensor]:
    """Per sample of length L: the critic's value at positions 0..L−2 (the state before each next token)."""
    batches = pack_micro_batches(sequences, micro_batches, device, one_length=pipeline_needs_one_length(model))
    results = run_forward(model, batches, lambda values, batch: {"values": values.squeeze(-1)}, blocks)
    return [v[:-1] for v in _merge(results, micro_batches, len(sequences))["values"]]
