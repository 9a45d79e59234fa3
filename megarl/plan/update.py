"""An update's peak on its GPU, beyond what the phase holds anyway (the processes' memory outside torch, the roles'
resident state): the larger of two moments.

- The backward: what the micro-batch saved (megarl/plan/activations.py), then the larger of the output layer's
  vocabulary-sized tensors (the actor's) and, with full recomputation, the layer recomputed later in the backward;
  and the caching allocator's blocks beyond the live tensors (`Calibration.update_cache_blocks` blocks of the
  update's largest tensor). With the optimizer offloaded and bf16 gradient buffers, the step's copy of each
  gradient shard to the host converts it to float32 on the GPU first, on the hybrid optimizer's copy stream, whose
  blocks the default stream's cache cannot give (torch's copy_ converts a non-blocking device-to-host copy on the
  source's device): four bytes per element of the largest parameter, beside everything the backward reserved.
- The optimizer step, when the optimizer is on the GPU: torch's foreach AdamW (megatron's optimizer without Apex or
  Transformer Engine) allocates the square roots of the second moments of a parameter group at once, four bytes per
  parameter of the shard; with bf16 gradient buffers megatron first copies the gradient shard to float32
  (DistributedOptimizer._copy_model_grads_to_main_grads), four more. The backward's tensors are gone by then.
"""

from __future__ import annotations

from megarl.plan.activations import (dispatch_bytes, largest_activation_bytes, logits_bytes, recomputed_bytes,
                                     saved_bytes, vocabulary_weight_bytes)
from megarl.plan.inputs import PlanInputs
from megarl.plan.result import Parts, PhaseEstimate
from megarl.plan.state import RoleState
from megarl.plan.tokens import micro_batch_tokens

FLOAT32 = 4


def update_estimate(inputs: PlanInputs, name: str, pool: str, held: Parts, state: RoleState) -> PhaseEstimate:
    """`held`: the phase's parts outside the update's own work; `state`: the updated role's."""
    backward = held + _backward(inputs, name, state)
    step = held + _step(state)
    if sum(size for _, size in step) > sum(size for _, size in backward):
        return PhaseEstimate(name, pool, step, inputs.gpu_bytes, note="in the optimizer step")
    return PhaseEstimate(name, pool, backward, inputs.gpu_bytes)


def _backward(inputs: PlanInputs, name: str, state: RoleState) -> Parts:
    cfg, cal = inputs.cfg, inputs.calibration
    role = "critic" if name == "update_critic" else "actor"
    shape, mesh = (inputs.critic, inputs.mesh("critic")) if role == "critic" else (inputs.policy, inputs.mesh("actor"))
    recompute = (cfg.critic if role == "critic" else cfg.actor).megatron.recompute_granularity
    tokens = micro_batch_tokens(inputs, name)
    saved = round(cal.activation_scale * saved_bytes(shape, mesh, tokens, recompute))
    recomputed = round(cal.activation_scale * recomputed_bytes(shape, mesh, tokens, recompute))
    largest = largest_activation_bytes(shape, mesh, tokens)
    vocabulary: Parts = ()
    if role == "actor":
        vocabulary = _vocabulary(logits_bytes(shape, mesh, tokens), vocabulary_weight_bytes(shape, mesh))
        largest = max(largest, logits_bytes(shape, mesh, tokens))
    if recomputed > sum(size for _, size in vocabulary):
        parts: Parts = (("activations", saved + recomputed),)
    else:
        parts = (("activations", saved),) + vocabulary
    if shape.is_moe:
        parts += (("expert dispatch", dispatch_bytes(shape, mesh, tokens)),)
    parts += (("allocator cache", cal.update_cache_blocks * largest),)
    if state.optimizer_offload and state.grad_bytes < FLOAT32:
        elements = _largest_parameter(inputs, role)
        parts += (("gradient copy to host", FLOAT32 * (min(elements, state.adapters) if state.adapters else elements)),)
    return parts


def _vocabulary(logits: int, weight_grad: int) -> Parts:
    """The output layer's bf16 logits [tokens × vocab/tp], which the log-prob function keeps for the backward
    (megarl/models/forward.py asks megatron's Float16Module for no float32 copy), and their bf16 gradient beside them.
    (GPTModel's transpose to [batch, tokens, vocab] copies nothing: a packed micro-batch is one row.) Then the output
    layer's and the embedding's weight gradient, which megatron without Transformer Engine's fused accumulation
    computes in bf16 before adding it to the fp32 buffer, one at a time, once the log-prob function's backward has
    freed the logits: it takes their block when it fits in one (torch's cache does not join separate blocks), and a
    block of its own when it does not, with fewer tokens per micro-batch than the hidden size. Nothing else: on a GPU
    the log-prob function's passes are single fused kernels with no float32 temporary
    (tests/gpu/test_compiled_gpu.py)."""
    parts: Parts = (("logits", logits), ("logit gradient", logits))
    if weight_grad > logits:
        parts += (("vocabulary weight grad", weight_grad),)
    return parts


def _step(state: RoleState) -> Parts:
    if state.optimizer_offload:
        return ()
    copies = 2 if state.grad_bytes < FLOAT32 else 1
    return (("optimizer step", state.optimizer_bytes(copies * FLOAT32)),)


def _largest_parameter(inputs: PlanInputs, role: str) -> int:
    """Elements of the largest parameter on one GPU: a vocabulary matrix [vocab/tp × hidden] (the embedding, the
    output layer), or fc1's [2 ffn/tp × hidden] (an expert's, or the router's [experts × hidden])."""
    shape, tp = (inputs.critic, inputs.mesh("critic").tp) if role == "critic" else (inputs.policy,
                                                                                     inputs.mesh("actor").tp)
    mlp = max(2 * shape.expert_ffn // tp, shape.experts) if shape.is_moe else 2 * shape.ffn // tp
    return max(-(-shape.vocab // tp), mlp) * shape.hidden
