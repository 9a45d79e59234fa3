"""The trainer's activation memory per GPU, from the model's shape and one micro-batch's tokens.

Source: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (§4.1): a GPT
layer saves sbh(34 + 5as/h) bytes for backward in 16-bit precision without parallelism, and sbh(10 + 24/t +
5as/(ht)) with tensor parallelism t and no sequence parallelism (megarl runs without it, megarl/models/bridge.py):
the 10 are the tensors every tensor-parallel rank holds whole (both norms' inputs, the QKV and fc1 inputs, and two
1-byte dropout masks), the 24 the ones split over the ranks, the 5as/h the attention scores.

Here the same tensor-by-tensor count, on the model's real widths instead of GPT's (grouped key/value heads, a
gated MLP of width ffn, Qwen3's per-head q/k norms) and in bf16 (2 bytes per element):
- held whole by every rank: input-norm input, QKV input, pre-MLP-norm input, fc1 input: 4h elements per token;
- split over t ranks: Q, K, V (q + 2kv), the attention output that feeds the projection (q), fc1's output (2 ffn,
  both halves for the gated activation's backward), the activation's output that feeds fc2 (ffn), and with q/k
  norms their inputs (q + kv).
Two of the paper's terms are absent: the models have no dropout (no masks), and attention runs in fused kernels
(SDPA's flash / memory-efficient kernels, or Transformer Engine's) that store no s² scores, so the 5as/h term
drops out. For the same reason megatron's selective recomputation (of core attention) saves nothing more here:
`selective` is planned as no recomputation.
"""

from __future__ import annotations

from megarl.plan.inputs import Mesh
from megarl.plan.shape import ModelShape

BF16 = 2


def layer_bytes(shape: ModelShape, tp: int, tokens: int) -> int:
    """What one layer saves for backward over `tokens` tokens on one tensor-parallel rank."""
    whole = 4 * shape.hidden
    split = 2 * shape.q_width + 2 * shape.kv_width + 3 * shape.ffn
    if shape.qk_norm:
        split += shape.q_width + shape.kv_width
    return BF16 * tokens * (whole * tp + split) // tp


def gpu_tokens(mesh: Mesh, tokens: int) -> int:
    """A micro-batch's tokens on one context-parallel rank."""
    return -(-tokens // mesh.cp)


def saved_bytes(shape: ModelShape, mesh: Mesh, tokens: int, recompute: str | None) -> int:
    """What a training micro-batch keeps for its backward on the fullest stage, at the backward's start. With `full`
    recomputation (megatron's uniform method, one layer per checkpoint) each layer keeps only its input; otherwise
    every layer keeps its own activations. Under the 1F1B pipeline schedule the first stage holds `pp` micro-batches
    in flight. The last stage also keeps the final norm's and the output layer's inputs."""
    tokens = gpu_tokens(mesh, tokens)
    layers = shape.layers // mesh.pp
    if recompute == "full":
        per_micro_batch = layers * BF16 * tokens * shape.hidden
    else:
        per_micro_batch = layers * layer_bytes(shape, mesh.tp, tokens)
    head = 2 * BF16 * tokens * shape.hidden
    return per_micro_batch * mesh.pp + head


def recomputed_bytes(shape: ModelShape, mesh: Mesh, tokens: int, recompute: str | None) -> int:
    """With `full` recomputation, one layer's activations exist again while its backward runs: later in the backward
    than the output layer's, whose vocabulary-sized tensors are gone by then. None without recomputation."""
    return layer_bytes(shape, mesh.tp, gpu_tokens(mesh, tokens)) if recompute == "full" else 0


def largest_activation_bytes(shape: ModelShape, mesh: Mesh, tokens: int) -> int:
    """A layer's largest activation: fc1's output, both halves of the gated MLP, [tokens × 2 ffn/tp] in bf16."""
    return BF16 * gpu_tokens(mesh, tokens) * 2 * shape.ffn // mesh.tp


def forward_bytes(shape: ModelShape, mesh: Mesh, tokens: int) -> int:
    """Without gradients only the running layer's tensors are alive: at most what it would have saved."""
    return layer_bytes(shape, mesh.tp, gpu_tokens(mesh, tokens))


def logits_bytes(shape: ModelShape, mesh: Mesh, tokens: int) -> int:
    """The output layer's logits for one micro-batch, [tokens × vocab/tp] in bf16, the layer's dtype."""
    return BF16 * gpu_tokens(mesh, tokens) * -(-shape.vocab // mesh.tp)


def vocabulary_weight_bytes(shape: ModelShape, mesh: Mesh) -> int:
    """One [vocab/tp × hidden] matrix (the output layer's, or the embedding's) in bf16."""
    return BF16 * -(-shape.vocab // mesh.tp) * shape.hidden
