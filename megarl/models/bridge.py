"""HF checkpoints ↔ megatron-core GPTModels through mbridge, with the local spec as a first-class path.

mbridge's bridge classes for the families megarl converts (Qwen2/2.5, Qwen3, Qwen3-MoE, Llama) are subclassed once
each (`BRIDGES`, keyed by the HF `model_type` as mbridge's own registry is). `MegarlBridge` overrides the
hooks mbridge's classes offer: the layer spec comes from `megarl.models.spec`, and every megatron parameter
name maps to HF names through the one table in `megarl.models.hf_names` (which knows the local spec's norm
names as well as Transformer Engine's). Sequence parallelism (which mbridge turns on whenever TP > 1) and the
fusions that need TE or CUDA are turned off on the local spec. A LoRA model (`lora`) is built on the local spec with
adapters in its linear layers (megarl/models/lora.py); the adapters are not HF tensors, so loading skips them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import torch
from mbridge.core import LLMBridge
from mbridge.core.safetensor_io import SafeTensorIO
from mbridge.models.llama import LLaMABridge
from mbridge.models.qwen2 import Qwen2Bridge
from mbridge.models.qwen3 import Qwen3Bridge
from mbridge.models.qwen3moe import Qwen3MoEBridge
from safetensors import safe_open
from transformers import AutoConfig

from megarl.models import fallbacks
from megarl.models.accelerators import moe_token_dispatcher, uses_transformer_engine
from megarl.models.hf_names import (EMBEDDING, LM_HEAD, OUTPUT_LAYER, VALUE_HEAD_NAME, expert_numbered_globally,
                                    hf_expert, hf_names)
from megarl.models.lora import Adapter, is_adapter
from megarl.models.spec import layer_spec

# Without TE: no sequence parallel (its norms need TE) and none of the fusions that need TE or Apex.
LOCAL_SPEC_ARGS = dict(
    sequence_parallel=False,
    masked_softmax_fusion=False,
    apply_rope_fusion=False,
    gradient_accumulation_fusion=False,
    persist_layer_norm=False,
)

# With TE: its fused RoPE kernel. Unfused, megatron rotates packed sequences one by one after a host sync (.tolist()).
TE_SPEC_ARGS = dict(apply_rope_fusion=True)

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


class _UniqueNamesSafeTensorIO(SafeTensorIO):
    """mbridge's reader counts a name asked for twice as missing; a value head and the embedding on one
    pipeline stage both ask for the embedding while loading."""

    def load_some_hf_weight(self, hf_weight_names: list[str]) -> dict:
        return super().load_some_hf_weight(list(dict.fromkeys(hf_weight_names)))


class MegarlBridge(LLMBridge):
    """The hooks megarl overrides in mbridge's bridge of a family (combined with it in `BRIDGES`).

    A tied output layer loads from the embedding and is not exported (the embedding is). With `value_head`
    the model is built untied (the scalar head is its own weight; a tied last pipeline stage would reduce its
    gradient with the embedding's). While loading, the head names the embedding, which every checkpoint has,
    so mbridge's value-model rule skips it (a one-row parameter named after the embedding or the LM head); it
    exports as `score.weight`."""

    has_vp_stage = True  # megatron-core's spec builders take vp_stage (mbridge probes it in the hook replaced)

    def __init__(self, hf_config, dtype: torch.dtype, *, use_transformer_engine: bool, value_head: bool,
                 hf_path: str, lora=None):
        self.use_transformer_engine = use_transformer_engine
        self.adapter = Adapter(lora.rank, lora.alpha, lora.dropout) if lora is not None and lora.rank else None
        self.adapter_targets = tuple(lora.target_modules) if self.adapter else ()
        self.value_head = value_head
        self.hf_path = hf_path
        tied = getattr(hf_config, "tie_word_embeddings", False)
        self.output_layer_source = EMBEDDING if tied or value_head else LM_HEAD
        if value_head:
            hf_config.tie_word_embeddings = False
        super().__init__(hf_config, dtype=dtype)

    @property
    def tied(self) -> bool:
        return getattr(self.hf_config, "tie_word_embeddings", False)

    def _adjust_mapping_for_shared_weights(self):
        # The names come from hf_names; mbridge's Qwen2 hook would retarget output_layer in its class's
        # mapping, which every later instance shares.
        pass

    def _get_transformer_layer_spec(self, vp_stage: int | None = None):
        return layer_spec(self.config, self.use_transformer_engine, vp_stage, self.adapter, self.adapter_targets)

    def _weight_name_mapping_mcore_local_to_global(self, model, consider_ep: bool = True) -> dict[str, str]:
        names = super()._weight_name_mapping_mcore_local_to_global(model, consider_ep)
        return {local: name for local, name in names.items() if not is_adapter(local)}

    def _weight_name_mapping_mcore_to_hf(self, mcore_weights_name: str) -> list[str]:
        return list(hf_names(mcore_weights_name, self.output_layer_source).names)

    def _weight_to_hf_format(self, mcore_weights_name: str, mcore_weights: torch.Tensor):
        if mcore_weights_name == OUTPUT_LAYER and self.tied:
            return [], []
        if mcore_weights_name == OUTPUT_LAYER and self.value_head:
            return [VALUE_HEAD_NAME], [mcore_weights]
        return super()._weight_to_hf_format(mcore_weights_name, mcore_weights)

    def _get_safetensor_io(self, weights_path: str):
        return _UniqueNamesSafeTensorIO(self._get_actual_hf_path(weights_path))


class Qwen2(MegarlBridge, Qwen2Bridge):
    """Qwen2 and Qwen2.5: QKV bias."""


class Qwen3(MegarlBridge, Qwen3Bridge):
    """Qwen3: QK norms."""


class Llama(MegarlBridge, LLaMABridge):
    """Llama: QKV bias as its config says, RoPE scaling."""


class Qwen3Moe(MegarlBridge, Qwen3MoEBridge):
    """Qwen3-MoE: QK norms, routed experts in every layer. The experts are megatron's per-expert loop (SequentialMLP,
    `local_experts.N` names, numbered from this rank's first expert; a grouped GEMM is not wired yet); the router
    takes the softmax over the top-k logits where HF renormalizes the top-k probabilities (`norm_topk_prob`), which is
    the same, and over all logits where it does not."""

    def _build_config(self):
        hf = self.hf_config
        return self._build_base_config(
            moe_ffn_hidden_size=hf.moe_intermediate_size, moe_router_topk=hf.num_experts_per_tok,
            num_moe_experts=hf.num_experts, moe_aux_loss_coeff=hf.router_aux_loss_coef,
            moe_router_load_balancing_type="none", moe_grouped_gemm=False,
            moe_router_score_function="softmax", moe_router_pre_softmax=not getattr(hf, "norm_topk_prob", False),
            qk_layernorm=True, **_dispatcher())

    def _weight_name_mapping_mcore_local_to_global(self, model, consider_ep: bool = True) -> dict[str, str]:
        names = super()._weight_name_mapping_mcore_local_to_global(model, consider_ep)
        per_rank = self.config.num_moe_experts // self.mpu.ep_size
        first = per_rank * self.mpu.ep_rank if consider_ep else 0
        return {local: expert_numbered_globally(name, first) for local, name in names.items()}

    def export_weights(self, models) -> Iterator[tuple[str, torch.Tensor]]:
        """mbridge's export, each expert's tensors gathered from the expert-parallel ranks (mbridge gathers only
        grouped-GEMM experts): every rank yields every expert, under its global number."""
        ep = self.mpu.ep_size
        for name, tensor in super().export_weights(models):
            expert = hf_expert(name)
            if ep == 1 or expert is None:
                yield name, tensor
                continue
            gathered = [torch.empty_like(tensor) for _ in range(ep)]
            torch.distributed.all_gather(gathered, tensor.contiguous(), group=self.mpu.ep_group)
            experts, local, rest = expert
            per_rank = self.config.num_moe_experts // ep
            for rank, part in enumerate(gathered):
                yield f"{experts}.{local + rank * per_rank}.{rest}", part


def _dispatcher() -> dict:
    """The token dispatcher (accelerators.moe_token_dispatcher). megatron allows the all-gather one only with
    activations of one shape: pipeline stages then pass every micro-batch at one length, which the packing gives
    them (packing.pipeline_needs_one_length)."""
    dispatcher = moe_token_dispatcher()
    if dispatcher == "alltoall":
        return {"moe_token_dispatcher_type": dispatcher}
    return {"moe_token_dispatcher_type": dispatcher, "variable_seq_lengths": False}  # mbridge's default is True


BRIDGES = {"qwen2": Qwen2, "qwen3": Qwen3, "qwen3_moe": Qwen3Moe, "llama": Llama}  # keyed by HF's model_type


def make_bridge(hf_path: str | Path, dtype: torch.dtype, transformer_impl: str = "auto", value_head: bool = False,
                lora=None, **config_args) -> MegarlBridge:
    """A bridge for the checkpoint at `hf_path`, building models with megarl's layer spec (see MegarlBridge).

    `transformer_impl` (a role's `megatron.transformer_impl`): Transformer Engine's layers only where it says
    transformer_engine (a LoRA model, `lora` with a rank, runs on the local spec). `config_args` override megatron
    TransformerConfig fields (e.g. recompute_granularity)."""
    use_te = uses_transformer_engine(transformer_impl) and not (lora is not None and lora.rank)
    fallbacks.install()
    hf_config = load_hf_config(hf_path)
    family = BRIDGES.get(hf_config.model_type)
    if family is None:
        raise ValueError(f"{hf_path}: model_type {hf_config.model_type!r}; megarl converts {sorted(BRIDGES)}")
    bridge = family(hf_config, dtype, use_transformer_engine=use_te, value_head=value_head, hf_path=str(hf_path),
                    lora=lora)
    extra = {**(TE_SPEC_ARGS if use_te else LOCAL_SPEC_ARGS), **config_args}
    if torch.cuda.is_available():
        extra = {**CUDA_FUSIONS, **extra}
    else:
        extra.setdefault("use_cpu_initialization", True)
    bridge.set_extra_args(**extra)
    return bridge


def export_hf_weights(bridge: MegarlBridge, models) -> Iterator[tuple[str, torch.Tensor]]:
    """Stream (HF name, tensor) one tensor at a time; every rank of the model-parallel group takes part,
    so every rank must iterate it to the end."""
    yield from bridge.export_weights(models)
