"""The checks of a recipe's `actor.lora` section (LoRA on the actor, megarl/models/lora.py)."""

from __future__ import annotations

from megarl.config.schema import LORA_TARGETS as TARGETS

# HF projection names → the megatron layer that holds them (megatron fuses q, k, v and gate, up).
HF_TARGETS = {"q_proj": "linear_qkv", "k_proj": "linear_qkv", "v_proj": "linear_qkv", "o_proj": "linear_proj",
              "gate_proj": "linear_fc1", "up_proj": "linear_fc1", "down_proj": "linear_fc2"}


def check_lora(cfg, problems: list[str]) -> None:
    lora = cfg.actor.lora
    if lora.rank < 0:
        problems.append(f"actor.lora.rank must be >= 0 (0 turns LoRA off), got {lora.rank}")
    if lora.rank <= 0:
        return
    if lora.alpha <= 0:
        problems.append(f"actor.lora.alpha must be > 0 (the adapters are scaled by alpha / rank), got {lora.alpha}")
    if not 0 <= lora.dropout < 1:
        problems.append(f"actor.lora.dropout must be in [0, 1), got {lora.dropout}")
    _check_targets(list(lora.target_modules), problems)
    if cfg.actor.megatron.transformer_impl == "transformer_engine":
        problems.append("actor.megatron.transformer_impl=transformer_engine does not apply to a LoRA actor "
                        "(actor.lora.rank > 0): its adapters are in megatron's local layers. Use auto or local")
    if cfg.actor.megatron.param_offload:
        problems.append("actor.megatron.param_offload does not apply to a LoRA actor (actor.lora.rank > 0): its "
                        "frozen base weights are not in megatron's parameter buffers, which is what it moves. Set "
                        "actor.megatron.param_offload=false")
    if not cfg.ref.megatron.param_offload:
        problems.append("ref.megatron.param_offload=false has no reference model to keep on the GPU: a LoRA actor "
                        "(actor.lora.rank > 0) is its own reference, its weights without the adapters. Remove the "
                        "override")


def _check_targets(targets: list[str], problems: list[str]) -> None:
    if not targets:
        problems.append(f"actor.lora.target_modules is empty: name some of {list(TARGETS)}")
    for name in targets:
        if name in TARGETS:
            continue
        if name in HF_TARGETS or name == "all-linear":
            fix = HF_TARGETS.get(name, ", ".join(TARGETS))
            problems.append(f"actor.lora.target_modules: {name!r} is a HF name; megarl's actor is a megatron model "
                            f"(q/k/v and gate/up are fused): write {fix}")
        else:
            problems.append(f"actor.lora.target_modules: unknown layer {name!r}; choose from {list(TARGETS)}")
