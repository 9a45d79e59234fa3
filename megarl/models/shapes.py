"""Architectures of the models the recipes use, as HF config values, and random-weight HF checkpoints of
them: nothing can be downloaded on our machines, so tests and benchmarks build these locally. Also the one
check that a tensor-parallel size splits a model's attention heads, for the config validators and the engines."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch

# The HF `model_type`s megarl trains megatron-core models of (megarl/models/bridge.py has a bridge for each).
MODEL_TYPES = ("llama", "qwen2", "qwen3", "qwen3_moe")

SHAPES = {
    # The tiny CPU recipes' model: 0.35M parameters; the vocabulary is a multiple of 64 as SGLang requires.
    "tiny": dict(
        model_type="qwen2", hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=384, max_position_embeddings=64,
        rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
    ),
    "qwen2.5-0.5b": dict(
        model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
        num_attention_heads=14, num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
    ),
    "qwen2.5-7b": dict(
        model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
        num_attention_heads=28, num_key_value_heads=4, vocab_size=152064, max_position_embeddings=32768,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
    ),
    "qwen3-0.6b": dict(
        model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
        max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
    ),
    "qwen3-4b": dict(
        model_type="qwen3", hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
        max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
    ),
    "qwen3-8b": dict(
        model_type="qwen3", hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=151936,
        max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
    ),
    "qwen3-30b-a3b": dict(  # 128 experts of width 768 in each of 48 layers, 8 routed per token
        model_type="qwen3_moe", hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
        num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, num_hidden_layers=48, num_attention_heads=32,
        num_key_value_heads=4, head_dim=128, vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=False,
    ),
}


def heads_split_problem(tp: int, kv_heads: int, heads: int | None = None) -> str | None:
    """Why tensor-parallel size `tp` cannot give every rank whole key/value heads (and whole attention heads,
    when `heads` is known), as words that follow the setting's name, e.g. "must divide the model's 14 attention
    heads and 2 key/value heads"; None when it can (or when `tp` < 1, which the size checks report)."""
    counts = [heads, kv_heads] if heads else [kv_heads]
    if tp < 1 or all(n % tp == 0 for n in counts):
        return None
    named = f"{heads} attention heads and {kv_heads} key/value heads" if heads else f"{kv_heads} key/value heads"
    return f"must divide the model's {named}"


def experts_of(config: Mapping[str, Any] | None) -> int:
    """The routed experts of a HF config.json (0: a dense model): `num_experts` in the hub's Qwen3-MoE files,
    `num_local_experts` where transformers 5 wrote it."""
    if not config:
        return 0
    return int(config.get("num_experts") or config.get("num_local_experts") or 0)


def hf_config(shape: str, **overrides):
    """The HF config of `shape` (values overridable), naming its causal-LM class as a saved model's would."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    values = {**SHAPES[shape], **overrides}
    return AutoConfig.for_model(**values, architectures=[MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[values["model_type"]]])


def write_random_checkpoint(shape: str, out: str | Path, seed: int = 0, dtype: torch.dtype = torch.bfloat16,
                            **overrides) -> Path:
    """A HF checkpoint of `shape` (config values overridable, e.g. num_hidden_layers=2) with random weights."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(shape, **overrides), dtype=dtype)
    out = Path(out)
    model.save_pretrained(out)
    return out
