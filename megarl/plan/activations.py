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

A mixture-of-experts layer (megatron's MoELayer, its all-to-all token dispatcher) keeps in place of the gated MLP's
tensors: the router's float32 logits (E per token), and for each of the k copies of a token routed to an expert the
expert's input and output (h each, whole on every tensor-parallel rank: the unpermute weighs the output by the routing
probability) and its fc1 and activation outputs (3 × expert width, split). With expert parallelism a rank computes the
copies it receives: as many as it sends when routing is even over the experts, as the plan assumes (megatron drops no
token, so a batch routed unevenly needs more). While a layer runs, the all-to-all's send and receive buffers (k·h per
token each) exist beside it: the dispatch buffers.
"""

from __future__ import annotations

from megarl.plan.inputs import Mesh
from megarl.plan.shape import ModelShape

BF16 = 2


def layer_bytes(shape: ModelShape, tp: int, tokens: int) -> int:
    """What one layer saves for backward over `tokens` tokens on one tensor-parallel rank."""
    whole = 4 * shape.hidden
    split = 2 * shape.q_width + 2 * shape.kv_width
    if shape.is_moe:
        routed = shape.experts_per_token
        whole += 2 * shape.experts + routed * 2 * shape.hidden  # float32 logits count as two bf16 elements
        split += routed * 3 * shape.expert_ffn
    else:
        split += 3 * shape.ffn
    if shape.qk_norm:
        split += shape.q_width + shape.kv_width
    return BF16 * tokens * (whole * tp + split) // tp


def dispatch_bytes(shape: ModelShape, mesh: Mesh, tokens: int) -> int:
    """A mixture-of-experts layer's all-to-all buffers while it runs (0 for a dense model)."""
    return BF16 * gpu_tokens(mesh, tokens) * 2 * shape.experts_per_token * shape.hidden


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
    """A layer's largest activation: fc1's output, both halves of the gated MLP, [tokens × 2 ffn/tp] in bf16 (a
    mixture-of-experts layer's: its experts' fc1 outputs together, [k·tokens × 2 expert width/tp])."""
    width = shape.experts_per_token * shape.expert_ffn if shape.is_moe else shape.ffn
    return BF16 * gpu_tokens(mesh, tokens) * 2 * width // mesh.tp


def forward_bytes(shape: ModelShape, mesh: Mesh, tokens: int) -> int:
    """Without gradients only the running layer's tensors are alive: at most what it would have saved, and its
    dispatch buffers."""
    return layer_bytes(shape, mesh.tp, gpu_tokens(mesh, tokens)) + dispatch_bytes(shape, mesh, tokens)


def logits_bytes(shape: ModelShape, mesh: Mesh, tokens: int) -> int:
    """The output layer's logits for one micro-batch, [tokens × vocab/tp] in bf16, the layer's dtype."""
    return BF16 * gpu_tokens(mesh, tokens) * -(-shape.vocab // mesh.tp)


def vocabulary_weight_bytes(shape: ModelShape, mesh: Mesh) -> int:
    """One [vocab/tp × hidden] matrix (the output layer's, or the embedding's) in bf16."""
    return BF16 * -(-shape.vocab // mesh.tp) * shape.hidden
