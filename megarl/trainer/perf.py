"""verl's `perf/*` metrics: tokens per second per device, the actor update's model FLOPs utilisation, memory; and
`memory/*/peak_gb`, each phase's device-wide GPU peak and the step's host peak (GB: 1e9 bytes, as `perf/*`).

MFU counts the dense matmul FLOPs of the actor's update (6 × parameters × tokens, plus causal attention) per
PPO epoch, against the device's dense bf16 peak; devices without a known peak (CPUs) report no MFU. A
mixture-of-experts layer counts the parameters a token passes through: its router and the k experts it is routed to.
"""

from __future__ import annotations

from megarl.columns import response_lengths
from parallel.batch import Batch

# Dense bf16 peak FLOP/s by device name fragment (vendor data sheets, without sparsity).
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "H800": 989e12, "A100": 312e12, "A800": 312e12,
                   "L40S": 362e12, "RTX 4090": 165e12, "RTX 3090": 71e12}


def peak_flops(device_name: str) -> float | None:
    return next((flops for fragment, flops in PEAK_BF16_FLOPS.items() if fragment in device_name), None)


def training_flops(hf_config, sequence_lengths: list[int], frozen_weights: bool = False,
                   value_head: bool = False) -> float:
    """FLOPs of one forward and backward pass over sequences of these lengths. `frozen_weights` (a LoRA actor): the
    backward computes no weight gradients of the base, 4 FLOPs per weight and token instead of 6 (the adapters'
    own are negligible). `value_head` (a critic): the output layer is one number per token, not the vocabulary."""
    hidden, layers = hf_config.hidden_size, hf_config.num_hidden_layers
    heads, kv_heads = hf_config.num_attention_heads, hf_config.num_key_value_heads
    head_dim = getattr(hf_config, "head_dim", None) or hidden // heads
    per_layer = hidden * head_dim * (2 * heads + 2 * kv_heads) + _mlp_parameters_per_token(hf_config)
    outputs = 1 if value_head else hf_config.vocab_size
    matmul_params = layers * per_layer + hidden * outputs  # the output layer; embeddings are lookups
    tokens = sum(sequence_lengths)
    # causal attention: QKᵀ and AV over half the square, ×3 for forward + backward
    attention = 6 * layers * heads * head_dim * sum(n * n for n in sequence_lengths)
    return (4 if frozen_weights else 6) * matmul_params * tokens + attention


def _mlp_parameters_per_token(hf_config) -> int:
    """The gated MLP's weights one token multiplies: the dense MLP's, or the router's and k experts'."""
    hidden = hf_config.hidden_size
    experts = getattr(hf_config, "num_experts", None) or getattr(hf_config, "num_local_experts", None)
    if experts:
        return hidden * experts + hf_config.num_experts_per_tok * 3 * hidden * hf_config.moe_intermediate_size
    return 3 * hidden * hf_config.intermediate_size


def summarise(per_rank: list[dict]) -> dict:
    """The ranks' `device_stats` → rank 0's device, the largest host figure."""
    return {"name": per_rank[0]["name"], "cpu_memory_used_gb": max(r["cpu_memory_used_gb"] for r in per_rank)}


# The step's phases on the GPUs whose memory peak is reported: name in `memory/{name}/peak_gb` → the timed windows
# (parallel/memory.py) whose largest peak it is. The sync is the hand-over from the engine's weights coming back to its
# KV cache coming back: a colocated engine's `resume` window spans it (its first visit starts it, the second ends it)
# and holds `update_weights`; engines on GPUs of their own have `update_weights` alone.
MEMORY_PHASES = {"gen": ("gen",), "gen_max": ("gen_max",), "reward_model": ("reward_model",), "judge": ("judge",),
                 "old_log_prob": ("old_log_prob",), "ref": ("ref",), "values": ("values",),
                 "update_critic": ("update_critic",), "update_actor": ("update_actor",),
                 "sync": ("update_weights", "resume")}


def memory_metrics(per_rank: list[dict]) -> dict[str, float]:
    """Worker processes' `memory_peaks` answers (parallel/memory.py) → per phase that ran, the largest device-wide
    peak of any GPU, and the largest of the asked processes' torch reservations and live tensors (none without
    GPUs); `memory/host/peak_gb`: the largest node's used RAM over the "step" window."""
    out = {}
    for name, windows in MEMORY_PHASES.items():
        device = _largest(per_rank, windows, "device")
        if device is not None:  # and so are the reservations and live tensors: each GPU answers all three
            out[f"memory/{name}/peak_gb"] = device / 1e9
            for kind in ("reserved", "allocated"):
                out[f"memory/{name}/{kind}_gb"] = (_largest(per_rank, windows, kind) or 0) / 1e9
    host = _largest(per_rank, ("step",), "host")
    if host is not None:
        out["memory/host/peak_gb"] = host / 1e9
    return out


def _largest(per_rank: list[dict], windows: tuple[str, ...], kind: str) -> int | None:
    values = [rank[window][kind] for rank in per_rank for window in windows
              if window in rank and rank[window][kind] is not None]
    return max(values, default=None)


def perf_metrics(batch: Batch, metrics: dict[str, float], gpus: int, actor_gpus: int, hf_config, ppo_epochs: int,
                 device: dict, frozen_weights: bool = False) -> dict[str, float]:
    """`gpus`: every GPU of the run (throughput is per GPU the run holds, rollout and critic pools included);
    `actor_gpus`: the actor's (its MFU); `device`: the actor ranks' `summarise`d `device_stats`.
    `perf/max_memory_allocated_gb` (verl's name): the most any asked process's tensors took in any phase of the step,
    from `metrics`' `memory/*/allocated_gb`."""
    lengths = [len(p) + int(r) for p, r in zip(batch["prompt_ids"], response_lengths(batch["response_mask"]).tolist())]
    step_s = metrics["timing_s/step"]
    out = {"perf/total_num_tokens": float(sum(lengths)), "perf/time_per_step": step_s,
           "perf/throughput": sum(lengths) / (step_s * gpus),
           "perf/cpu_memory_used_gb": device["cpu_memory_used_gb"]}
    allocated = [value for key, value in metrics.items() if key.startswith("memory/") and key.endswith("/allocated_gb")]
    if allocated:
        out["perf/max_memory_allocated_gb"] = max(allocated)
    peak = peak_flops(device["name"])
    if peak and "timing_s/update_actor" in metrics:
        flops = training_flops(hf_config, lengths, frozen_weights) * ppo_epochs
        out["perf/mfu/actor"] = flops / (metrics["timing_s/update_actor"] * actor_gpus * peak)
    return out
