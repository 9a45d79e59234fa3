"""Where each role's weights, gradients and optimizer state are, phase by phase (parallel/offload.py's residency).

Per GPU, with P the role's parameters on it: bf16 weights 2P; gradient buffers 4P in fp32 (grad_reduce_in_fp32, the
default) or 2P in bf16;
megatron's distributed optimizer, sharded over the data- and context-parallel ranks (S of them), holds fp32 master
weights 4P/S and Adam's two moments 8P/S. The offloads change where they are:
- optimizer_offload: the 12P/S live in host memory (megatron's hybrid optimizer, steps there) with a pinned host
  copy of the gradient shard (4P/S); the GPU holds none of it, in any phase.
- grad_offload: the gradient buffers are freed outside the role's own update (nothing is copied out).
- param_offload: the weights move to a pinned host copy (2P) outside the role's own calls.
The reference is frozen (no gradients, no optimizer); offloaded (`ref.megatron.param_offload`, the default) it is on
the GPU only for its forward. A LoRA actor trains only its adapters (T parameters: gradients 4T, optimizer 12T/S,
beside the 2(P + T) weights) and is its own reference. A mixture-of-experts model's experts (E of the P) have their
state sharded over the expert data-parallel ranks instead (S / EP of them): 12E·EP/S.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from megarl.config import MegatronConfig
from megarl.plan.inputs import Mesh, PlanInputs
from megarl.plan.result import Parts
from megarl.plan.shape import ModelShape

# The phases in which each role's weights are in use (the actor's also while they stream into the engines).
CALLS = {"actor": ("old_log_prob", "update_actor", "sync"), "critic": ("values", "update_critic"),
         "reference": ("ref",)}
UPDATES = {"actor": "update_actor", "critic": "update_critic"}


@dataclass(frozen=True)
class RoleState:
    role: str  # actor | critic | reference
    parameters: int  # on the fullest GPU
    optimizer_shards: int
    trained: bool
    param_offload: bool
    grad_offload: bool
    optimizer_offload: bool
    grad_bytes: int = 4  # per trained parameter: fp32 gradient buffers, or 2 for bf16 ones
    adapters: int = 0  # LoRA: the trained parameters; 0: all are trained
    expert_parameters: int = 0  # of `parameters`: a mixture-of-experts model's experts on this GPU
    expert_optimizer_shards: int = 1

    def optimizer_bytes(self, per_parameter: int) -> int:
        """`per_parameter` bytes for each trained parameter whose optimizer state this GPU holds (megatron's
        distributed optimizer's shard)."""
        if self.adapters:
            return per_parameter * self.adapters // self.optimizer_shards
        dense = self.parameters - self.expert_parameters
        return (per_parameter * dense // self.optimizer_shards
                + per_parameter * self.expert_parameters // self.expert_optimizer_shards)

    def gpu_parts(self, phase: str) -> Parts:
        """The role's bytes on its GPU during `phase`."""
        parts = []
        if not self.param_offload or phase in CALLS[self.role]:
            parts.append((f"{self.role} weights", 2 * (self.parameters + self.adapters)))
        p = self.adapters or self.parameters
        if self.trained:
            if not self.grad_offload or phase == UPDATES[self.role]:
                parts.append((f"{self.role} grads", self.grad_bytes * p))
            if not self.optimizer_offload:
                parts.append((f"{self.role} optimizer", self.optimizer_bytes(12)))
        return tuple(parts)

    def host_parts(self) -> Parts:
        """The role's pinned or offloaded host copies, per GPU process."""
        parts = []
        if self.param_offload:
            parts.append((f"{self.role} weights", 2 * self.parameters))
        if self.trained and self.optimizer_offload:
            parts.append((f"{self.role} optimizer", self.optimizer_bytes(16)))
        return tuple(parts)


def role_states(inputs: PlanInputs) -> dict[str, RoleState]:
    """The roles the recipe runs: the actor; the reference with a KL term; the critic with GAE."""
    cfg, mesh = inputs.cfg, inputs.mesh("actor")
    states = {"actor": _trained("actor", inputs.policy, mesh, cfg.actor.megatron)}
    lora = cfg.actor.lora
    if lora.rank:
        adapters = inputs.policy.lora_gpu_parameters(mesh.tp, mesh.pp, lora.rank, lora.target_modules)
        states["actor"] = replace(states["actor"], adapters=adapters)
    if cfg.reference_model:
        states["reference"] = RoleState("reference", states["actor"].parameters, mesh.optimizer_shards, trained=False,
                                        param_offload=cfg.ref.megatron.param_offload, grad_offload=False,
                                        optimizer_offload=False)
    if cfg.use_critic:
        mesh = inputs.mesh("critic")
        states["critic"] = _trained("critic", inputs.critic, mesh, cfg.critic.megatron)
    return states


def _trained(role: str, shape: ModelShape, mesh: Mesh, megatron: MegatronConfig) -> RoleState:
    return RoleState(role, shape.gpu_parameters(mesh.tp, mesh.pp, value_head=role == "critic", ep=mesh.ep),
                     mesh.optimizer_shards, trained=True, param_offload=megatron.param_offload,
                     grad_offload=megatron.grad_offload, optimizer_offload=megatron.optimizer_offload,
                     grad_bytes=4 if megatron.grad_reduce_in_fp32 else 2,
                     expert_parameters=shape.expert_gpu_parameters(mesh.tp, mesh.pp, mesh.ep),
                     expert_optimizer_shards=mesh.expert_optimizer_shards)
