"""The declared HF ⇄ megatron mapping (megarl.models.hf_names), the layer specs per pipeline stage
(megarl.models.spec) and the bridge that uses both (megarl.models.bridge)."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from megarl.models.hf_names import LAYER_NAMES, hf_names
from tests.helpers import ENV, make_model

WORKER = Path(__file__).with_name("bridge_worker.py")


def test_both_norm_spellings_name_the_same_hf_tensors():
    local_and_te = {"input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
                    "pre_mlp_layernorm.weight": "mlp.linear_fc1.layer_norm_weight"}
    for local, te in local_and_te.items():
        assert LAYER_NAMES[local] == LAYER_NAMES[te]
        assert hf_names(f"decoder.layers.3.{local}") == hf_names(f"decoder.layers.3.{te}")
    assert hf_names("decoder.layers.3.pre_mlp_layernorm.weight").names == (
        "model.layers.3.post_attention_layernorm.weight",)


def test_the_output_layer_goes_by_the_name_it_is_given():
    assert hf_names("output_layer.weight").names == ("lm_head.weight",)
    assert hf_names("output_layer.weight", "model.embed_tokens.weight").names == ("model.embed_tokens.weight",)


def test_fused_tensors_name_their_parts_in_megatron_order():
    assert hf_names("decoder.layers.0.mlp.linear_fc1.weight") == (
        ("model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"), 0)
    assert [n.rsplit(".", 2)[-2] for n in hf_names("decoder.layers.0.self_attention.linear_qkv.bias").names] == [
        "q_proj", "k_proj", "v_proj"]


@pytest.mark.parametrize("stage, layers", [(0, 1), (1, 2)])
def test_the_local_spec_is_megatrons_block_spec_per_stage_with_sdpa_float32_qk_norms_and_compiled_layers(
        monkeypatch, stage, layers):
    from megatron.core import parallel_state
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    from megatron.core.transformer.transformer_layer import TransformerLayer

    from megarl.models.attention import SDPAttention
    from megarl.models.compiled_layer import CompiledTransformerLayer
    from megarl.models.qk_norm import QKNormFloat32Out
    from megarl.models.spec import layer_spec

    monkeypatch.setattr(parallel_state, "get_pipeline_model_parallel_rank", lambda: stage)
    config = TransformerConfig(
        num_layers=3, hidden_size=64, num_attention_heads=4, normalization="RMSNorm", qk_layernorm=True,
        pipeline_model_parallel_size=2, num_layers_in_first_pipeline_stage=1, pipeline_dtype=torch.float32,
    )
    mine = layer_spec(config, use_transformer_engine=False)
    megatron = get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization="RMSNorm")
    assert len(mine.layer_specs) == len(megatron.layer_specs) == layers
    assert mine.layer_norm is WrappedTorchNorm
    for ours, theirs in zip(mine.layer_specs, megatron.layer_specs):
        attention, reference = ours.submodules.self_attention.submodules, theirs.submodules.self_attention.submodules
        assert attention.core_attention is SDPAttention and reference.core_attention is DotProductAttention
        swapped = dict(core_attention=None, q_layernorm=None, k_layernorm=None)
        assert replace(attention, **swapped) == replace(reference, **swapped)
        assert attention.q_layernorm is attention.k_layernorm is QKNormFloat32Out
        assert ours.submodules.input_layernorm is WrappedTorchNorm
        assert ours.submodules.mlp == theirs.submodules.mlp
        assert ours.module is CompiledTransformerLayer and theirs.module is TransformerLayer


def test_lora_layers_keep_megatrons_uncompiled_layer_class(monkeypatch):
    from megatron.core import parallel_state
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.transformer_layer import TransformerLayer

    from megarl.models.lora import Adapter, LoRAColumnParallelLinear
    from megarl.models.spec import layer_spec

    monkeypatch.setattr(parallel_state, "get_pipeline_model_parallel_rank", lambda: 0)
    config = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, normalization="RMSNorm",
                               pipeline_model_parallel_size=2, pipeline_dtype=torch.float32)
    block = layer_spec(config, use_transformer_engine=False, adapter=Adapter(rank=4, alpha=8.0, dropout=0.0),
                       adapter_targets=("linear_qkv",))
    for layer in block.layer_specs:
        assert layer.module is TransformerLayer
        assert layer.submodules.self_attention.submodules.linear_qkv.module is LoRAColumnParallelLinear


def test_a_family_megarl_does_not_convert_is_named(tmp_path):
    from transformers import MistralConfig

    from megarl.models.bridge import make_bridge

    MistralConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="model_type 'mistral'; megarl converts"):
        make_bridge(tmp_path, torch.float32)


def test_transformer_impl_chooses_the_layers_and_auto_is_local_where_te_is_installed(tmp_path, monkeypatch):
    """`auto` builds the local spec even where Transformer Engine is importable (as in the Docker image; the layers
    built there: test_pipeline_stages_build_and_export_through_the_mapping); only `transformer_engine` asks for TE's
    layers, and where TE is missing that is an error naming it."""
    from megarl.config.schema import MegatronConfig
    from megarl.models import accelerators
    from megarl.models.roles import build_reference

    model = make_model("qwen2", tmp_path / "model")
    with pytest.raises(ValueError, match="transformer_impl=transformer_engine needs Transformer Engine"):
        build_reference(model, MegatronConfig(transformer_impl="transformer_engine"))  # the role's flag reaches it
    monkeypatch.setattr(accelerators, "transformer_engine_available", lambda: True)  # TE installed, as on GPUs
    assert [accelerators.uses_transformer_engine(impl) for impl in ("auto", "local", "transformer_engine")] == [
        False, False, True]


def test_the_config_accepts_the_families_that_have_a_bridge():
    from megarl.models.bridge import BRIDGES
    from megarl.models.shapes import MODEL_TYPES

    assert sorted(BRIDGES) == sorted(MODEL_TYPES)


def test_pipeline_stages_build_and_export_through_the_mapping(tmp_path):
    """A tied Qwen3 in two pipeline stages: one SDPA layer per stage (megarl's local layers, which the default
    transformer_impl builds where Transformer Engine is installed too), every checkpoint tensor exported once (the
    tied output layer is the embedding), the critic's head as score.weight, mbridge's classes untouched."""
    model = make_model("qwen3", tmp_path / "model")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(WORKER), str(model),
           str(tmp_path / "out.json"), "--pp", "2", "--te-installed"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    result = json.loads((tmp_path / "out.json").read_text())
    from megarl.models.bridge import read_hf_tensors

    checkpoint = sorted(read_hf_tensors(model))
    assert [stage["layers"] for stage in result["stages"]] == [[[1, "SDPAttention"]], [[2, "SDPAttention"]]]
    assert [stage["final_norms"] for stage in result["stages"]] == [[], ["RMSNorm"]]
    assert sorted(result["actor_names"]) == checkpoint
    assert sorted(result["critic_names"]) == sorted(checkpoint + ["score.weight"])
    assert result["mbridge_output_layer"] == "lm_head.weight"
