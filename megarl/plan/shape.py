"""A decoder model's shape, read from its HF config.json alone, and its exact parameter counts as megatron splits
them: tensor parallelism splits the vocabulary (embedding, output layer) and attention/MLP widths and replicates
the norms; pipeline parallelism splits the layers, with the embedding on the first stage and the output layer on
the last (with tied embeddings and more than one stage, the last stage holds its own copy of the embedding).
A mixture-of-experts layer (Qwen3-MoE: every layer's MLP is routed experts, no shared expert) holds its router
whole on every rank and `experts / ep` experts, each split over the tensor-parallel ranks (megatron's default
expert tensor parallelism, the layers')."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from megarl.config import ConfigError
from megarl.models.shapes import SHAPES, experts_of

# Per-family structure that config.json does not spell out: Qwen2's attention has QKV biases, Qwen3 normalises
# each query and key head (q_norm, k_norm: head_dim weights each; Qwen3-MoE too). Other families (Llama) have neither.
QKV_BIAS_FAMILIES = ("qwen2",)
QK_NORM_FAMILIES = ("qwen3", "qwen3_moe")
REQUIRED_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")


@dataclass(frozen=True)
class ModelShape:
    model_type: str
    hidden: int
    ffn: int  # the MLP's intermediate size (gated: fc1 has 2 × ffn outputs)
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool
    qkv_bias: bool
    qk_norm: bool
    max_positions: int | None = None
    experts: int = 0  # routed experts per layer (0: a dense model)
    expert_ffn: int = 0  # an expert's intermediate size
    experts_per_token: int = 0

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any], where: str) -> ModelShape:
        """`where` names the config in errors (a path or a shape name)."""
        missing = [key for key in REQUIRED_KEYS if key not in config]
        if missing:
            raise ConfigError(f"{where} lacks {', '.join(missing)}: the memory plan needs a decoder's full config.json")
        model_type = config.get("model_type", "")
        heads = config["num_attention_heads"]
        return cls(**_experts(config, where),
            model_type=model_type, hidden=config["hidden_size"], ffn=config["intermediate_size"],
            layers=config["num_hidden_layers"], heads=heads, kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads, vocab=config["vocab_size"],
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),
            qkv_bias=model_type in QKV_BIAS_FAMILIES, qk_norm=model_type in QK_NORM_FAMILIES,
            max_positions=config.get("max_position_embeddings"),
        )

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @classmethod
    def from_dir(cls, path: str | Path | None, key: str = "model.path") -> ModelShape:
        """The shape of the HF checkpoint directory `path` (its config.json is enough); `key` names it in errors."""
        instead = f"`megarl plan --shape NAME` plans one of {', '.join(SHAPES)} instead"
        if not path:
            raise ConfigError(f"{key} is not set: the memory plan needs the model's config.json ({instead})")
        file = Path(path).expanduser() / "config.json"
        try:
            config = json.loads(file.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"{key}={path}: cannot read {file} ({e}): the memory plan needs the model's config.json "
                              f"({instead})") from e
        return cls.from_hf_config(config, str(file))

    @classmethod
    def named(cls, name: str) -> ModelShape:
        """One of megarl.models.shapes.SHAPES."""
        if name not in SHAPES:
            raise ConfigError(f"unknown shape {name!r}: use one of {', '.join(SHAPES)}")
        return cls.from_hf_config(SHAPES[name], f"shape {name}")

    def with_layers(self, layers: int) -> ModelShape:
        return replace(self, layers=layers)

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    def layer_parameters(self, tp: int, ep: int = 1) -> int:
        """One transformer layer's parameters on one tensor-parallel (and expert-parallel) rank."""
        qkv = self.q_width + 2 * self.kv_width
        attention = (self.hidden * qkv + self.q_width * self.hidden + (qkv if self.qkv_bias else 0)) // tp
        if self.is_moe:
            mlp = self.hidden * self.experts + self.layer_expert_parameters(tp, ep)  # the router, replicated
        else:
            mlp = 3 * self.hidden * self.ffn // tp  # fc1 (gate and up) and fc2
        norms = 2 * self.hidden + (2 * self.head_dim if self.qk_norm else 0)  # replicated on every rank
        return attention + mlp + norms

    def layer_expert_parameters(self, tp: int, ep: int) -> int:
        """One layer's experts on one rank: each a gated MLP of width expert_ffn (0 for a dense model)."""
        return self.experts // ep * 3 * self.hidden * self.expert_ffn // tp

    def expert_gpu_parameters(self, tp: int, pp: int, ep: int) -> int:
        """The experts on one GPU of the fullest stage: megatron's optimizer shards them over the expert
        data-parallel ranks, not the data-parallel ones (megarl/plan/state.py)."""
        return self.layers // pp * self.layer_expert_parameters(tp, ep)

    def lora_layer_parameters(self, tp: int, rank: int, targets) -> int:
        """One layer's LoRA adapters on one tensor-parallel rank (megarl/models/lora.py): A [rank × in] and B
        [out × rank], with the dim its base layer splits (column-parallel: B's out; row-parallel: A's in) split."""
        qkv = self.q_width + 2 * self.kv_width
        sizes = {"linear_qkv": (self.hidden, qkv // tp), "linear_fc1": (self.hidden, 2 * self.ffn // tp),
                 "linear_proj": (self.q_width // tp, self.hidden), "linear_fc2": (self.ffn // tp, self.hidden)}
        return sum(rank * sum(sizes[target]) for target in targets)

    def lora_gpu_parameters(self, tp: int, pp: int, rank: int, targets) -> int:
        """The adapters of the fullest pipeline stage's layers."""
        return self.layers // pp * self.lora_layer_parameters(tp, rank, targets)

    def stage_parameters(self, tp: int, pp: int, value_head: bool = False, ep: int = 1) -> list[int]:
        """Parameters on one GPU of each pipeline stage (every tensor-parallel rank of a stage holds as many).
        `value_head`: the critic's, a [1 × hidden] linear on the last stage in place of the output layer."""
        vocab_rows = -(-self.vocab // tp)
        stages = [self.layers // pp * self.layer_parameters(tp, ep) for _ in range(pp)]
        stages[0] += vocab_rows * self.hidden  # the embedding
        stages[-1] += self.hidden  # the final norm
        if value_head:
            stages[-1] += self.hidden
        elif not self.tied_embeddings or pp > 1:
            stages[-1] += vocab_rows * self.hidden
        return stages

    def gpu_parameters(self, tp: int, pp: int, value_head: bool = False, ep: int = 1) -> int:
        """The largest stage's: what the fullest GPU holds."""
        return max(self.stage_parameters(tp, pp, value_head, ep))

    @property
    def parameters(self) -> int:
        return self.gpu_parameters(1, 1)

    def kv_cache_bytes_per_token(self, rollout_tp: int) -> int:
        """SGLang's KV cell on one GPU: K and V of every layer for this rank's key/value heads (at least one: a
        rank with fewer heads than ranks replicates one), bf16."""
        return max(1, self.kv_heads // rollout_tp) * self.head_dim * self.layers * 2 * 2


def _experts(config: Mapping[str, Any], where: str) -> dict[str, int]:
    """A mixture-of-experts config's expert fields (none for a dense model); the layouts megarl builds only."""
    experts = experts_of(config)
    if not experts:
        return {}
    unplanned = [f"{key}={config[key]}" for key in ("shared_expert_intermediate_size", "mlp_only_layers")
                 if config.get(key)]
    if config.get("decoder_sparse_step", 1) != 1:
        unplanned.append(f"decoder_sparse_step={config['decoder_sparse_step']}")
    if unplanned:
        raise ConfigError(f"{where}: {', '.join(unplanned)}: the memory plan models mixture-of-experts models whose "
                          f"every layer is routed experts alone (Qwen3-MoE)")
    return dict(experts=experts, expert_ffn=config["moe_intermediate_size"],
                experts_per_token=config["num_experts_per_tok"])
