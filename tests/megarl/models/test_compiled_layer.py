"""megarl/models/compiled_layer.py: which layers compile. Only one GPU's model (tensor, pipeline and context parallel
size 1) on a GPU; every other layout, a mixture-of-experts layer, and CPU run megatron's layer eagerly."""

import pytest
import torch
from megatron.core.transformer import TransformerConfig

from megarl.models import compiled_layer


def config(tp: int = 1, pp: int = 1, cp: int = 1, experts: int | None = None) -> TransformerConfig:
    return TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, tensor_model_parallel_size=tp,
                             pipeline_model_parallel_size=pp, context_parallel_size=cp, pipeline_dtype=torch.float32,
                             num_moe_experts=experts, moe_router_topk=2)


@pytest.mark.parametrize("cuda, layout, compiles", [
    (True, {}, True), (True, {"tp": 2}, False), (True, {"pp": 2}, False), (True, {"cp": 2}, False),
    (True, {"experts": 4}, False), (False, {}, False),
])
def test_only_one_gpus_model_compiles_its_layers(monkeypatch, cuda, layout, compiles):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert compiled_layer.compiles_layers(config(**layout)) is compiles
