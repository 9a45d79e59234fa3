"""HF checkpoints ↔ megatron-core GPTModels through mbridge, with the local spec as a first-class path.

mbridge builds Transformer Engine's layer spec unconditionally and names the layer norms the TE way. Here
one bridge instance is adapted instead of writing a second converter: its layer spec comes from
`megarl.models.spec`, and on the local spec the two norms that TE fuses into the linear layers
(`input_layernorm`, `pre_mlp_layernorm`) are mapped to their HF names. Sequence parallelism (which mbridge
turns on whenever TP > 1) and the fusions that need TE or CUDA are turned off on the local spec.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import torch
from mbridge import AutoBridge
from safetensors import safe_open
from transformers import AutoConfig

from megarl.models.accelerators import transformer_engine_available
from megarl.models.spec import layer_spec

# Without TE: no sequence parallel (its norms need TE) and none of the fusions that need TE or Apex.
LOCAL_SPEC_ARGS = dict(
    sequence_parallel=False,
    masked_softmax_fusion=False,
    apply_rope_fusion=False,
    gradient_accumulation_fusion=False,
    persist_layer_norm=False,
)
# megatron's own fused SwiGLU and bias-dropout-add kernels need only CUDA.
CUDA_FUSIONS = dict(bias_activation_fusion=True, bias_dropout_fusion=True)


def read_hf_tensors(path: str | Path, names: list[str] | None = None) -> dict[str, torch.Tensor]:
    """Tensors of a HF safetensors checkpoint directory: all of them, or those of `names` it has."""
    path = Path(path)
    index = path / "model.safetensors.index.json"
    if names is not None and index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = sorted({path / weight_map[name] for name in names if name in weight_map})
    else:
        files = sorted(path.glob("*.safetensors"))
    tensors = {}
    for file in files:
        with safe_open(str(file), framework="pt") as reader:
            wanted = reader.keys() if names is None else [n for n in names if n in reader.keys()]
            tensors.update({name: reader.get_tensor(name) for name in wanted})
    return tensors


def load_hf_config(path: str | Path):
    hf_config = AutoConfig.from_pretrained(path)
    # transformers 5 keeps rope_theta inside rope_parameters; mbridge reads the attribute.
    if getattr(hf_config, "rope_theta", None) is None:
        hf_config.rope_theta = (getattr(hf_config, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    return hf_config


VALUE_HEAD_NAME = "score.weight"  # as in HF's AutoModelForTokenClassification(num_labels=1)


def make_bridge(hf_path: str | Path, dtype: torch.dtype, use_transformer_engine: bool | None = None,
                value_head: bool = False, **config_args):
    """An mbridge Bridge for the checkpoint at `hf_path`, building models with megarl's layer spec.

    `use_transformer_engine` defaults to whether TE is importable. `config_args` override megatron
    TransformerConfig fields (e.g. recompute_granularity). With `value_head` the model is built untied (the
    scalar head is its own weight; a tied last pipeline stage would reduce its gradient with the embedding's);
    while loading, the head maps to the embedding so mbridge's value-model rule skips it, and it exports as
    `score.weight` (see `name_value_head_for_export`)."""
    use_te = transformer_engine_available() if use_transformer_engine is None else use_transformer_engine
    hf_config = load_hf_config(hf_path)
    tied = getattr(hf_config, "tie_word_embeddings", False)
    bridge = AutoBridge.from_config(hf_config, dtype=dtype)
    extra = dict(config_args)
    if not use_te:
        extra = {**LOCAL_SPEC_ARGS, **extra}
    if torch.cuda.is_available():
        extra = {**CUDA_FUSIONS, **extra}
    else:
        extra.setdefault("use_cpu_initialization", True)
    bridge.set_extra_args(**extra)
    bridge._get_transformer_layer_spec = lambda vp_stage=None: layer_spec(bridge.config, use_te, vp_stage)
    # mbridge retargets output_layer on the class when a tied model is built; pin it per instance.
    bridge._DIRECT_MAPPING = {
        **bridge._DIRECT_MAPPING,
        "output_layer.weight": "model.embed_tokens.weight" if tied or value_head else "lm_head.weight",
    }
    if value_head:
        hf_config.tie_word_embeddings = False
        _deduplicate_loaded_names(bridge)
    if not use_te:
        bridge._OTHER_MAPPING = {
            **bridge._OTHER_MAPPING,
            "input_layernorm.weight": ["model.layers.{layer_number}.input_layernorm.weight"],
        }
        bridge._MLP_MAPPING = {
            "pre_mlp_layernorm.weight": ["model.layers.{layer_number}.post_attention_layernorm.weight"],
            **bridge._MLP_MAPPING,
        }
    bridge.hf_path = str(hf_path)
    return bridge


def _deduplicate_loaded_names(bridge) -> None:
    # The head and the embedding both name model.embed_tokens.weight; mbridge's reader counts duplicates.
    make_reader = bridge._get_safetensor_io

    def reader(path):
        io = make_reader(path)
        load_some = io.load_some_hf_weight
        io.load_some_hf_weight = lambda names: load_some(list(dict.fromkeys(names)))
        return io

    bridge._get_safetensor_io = reader


def name_value_head_for_export(bridge) -> None:
    bridge._DIRECT_MAPPING = {**bridge._DIRECT_MAPPING, "output_layer.weight": VALUE_HEAD_NAME}


def export_hf_weights(bridge, models) -> Iterator[tuple[str, torch.Tensor]]:
    """Stream (HF name, tensor) one tensor at a time; every rank of the model-parallel group takes part,
    so every rank must iterate it to the end. A tied lm_head is not repeated."""
    tied = getattr(bridge.hf_config, "tie_word_embeddings", False)
    for name, tensor in bridge.export_weights(models):
        if tied and name == "lm_head.weight":
            continue
        yield name, tensor
