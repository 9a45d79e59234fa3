"""Parameter counts: per GPU against tiny megatron models that megarl builds from a config.json alone (TP 1 and 2,
PP 2, actor and critic; a mixture of experts also at EP 2), and the whole model against the HF model of each built-in
shape."""

import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM

from megarl.config import ConfigError
from megarl.models.shapes import SHAPES, hf_config
from megarl.plan import ModelShape
from tests.helpers import ENV, REPO_ROOT

PARAM_WORKER = REPO_ROOT / "tests" / "megarl" / "plan" / "param_worker.py"
TINY = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256}


def write_config(directory, family: str):
    """A directory holding only config.json. Qwen2: QKV bias, untied; Qwen3: q/k norms, tied; Llama: neither, untied;
    Qwen3-MoE: q/k norms, 4 experts (2 per token), untied."""
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config, Qwen3MoeConfig

    if family == "qwen3_moe":
        Qwen3MoeConfig(**TINY, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
                       tie_word_embeddings=False).save_pretrained(directory)
        return directory
    config_cls = {"qwen2": Qwen2Config, "qwen3": Qwen3Config, "llama": LlamaConfig}[family]
    config_cls(**TINY, tie_word_embeddings=family == "qwen3").save_pretrained(directory)
    return directory


def test_parameters_per_gpu_match_models_megarl_builds(tmp_path):
    dirs = [str(write_config(tmp_path / family, family)) for family in ("qwen2", "qwen3", "llama", "qwen3_moe")]
    out = tmp_path / "counts.json"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(PARAM_WORKER),
                           str(out), *dirs], capture_output=True, text=True, timeout=300, env=ENV, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    counts = json.loads(out.read_text())
    for model_dir in dirs:
        shape = ModelShape.from_dir(model_dir)
        for layout, per_rank in counts[model_dir].items():
            tp, pp, ep = (int(n) for n in layout.split(",")[:3])
            value_head = layout.endswith("True")
            stages = shape.stage_parameters(tp, pp, value_head, ep)
            # Two ranks: TP 2 (both hold the one stage's share), PP 2 (one stage each), EP 2 (half the experts
            # each), or TP 1 (DP 2: whole copies).
            expected = stages if pp == 2 else stages * 2
            assert per_rank == expected, (model_dir, layout)
            assert shape.gpu_parameters(tp, pp, value_head, ep) == max(per_rank)
    moe = ModelShape.from_dir(dirs[-1])
    assert moe.expert_gpu_parameters(1, 1, 2) * 2 == moe.expert_gpu_parameters(1, 1, 1) > 0
    assert counts[dirs[-1]]["1,1,2,False"][0] < counts[dirs[-1]]["1,1,1,False"][0]


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_whole_model_agrees_with_the_hf_model(name):
    with torch.device("meta"):  # no memory: only the parameters' shapes
        model = AutoModelForCausalLM.from_config(hf_config(name))
    assert ModelShape.named(name).parameters == sum(p.numel() for p in model.parameters())


def test_fewer_layers_drop_whole_layers():
    full = ModelShape.named("qwen3-8b")
    assert full.parameters - full.with_layers(18).parameters == 18 * full.layer_parameters(1)


def test_a_directory_holding_only_config_json_is_enough(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**SHAPES["qwen2.5-0.5b"]}))
    assert ModelShape.from_dir(tmp_path) == ModelShape.named("qwen2.5-0.5b")
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 4}))
    with pytest.raises(ConfigError, match="lacks hidden_size, intermediate_size"):
        ModelShape.from_dir(tmp_path)
    with pytest.raises(ConfigError, match="cannot read .*absent/config.json"):
        ModelShape.from_dir(tmp_path / "absent")
    with pytest.raises(ConfigError, match="model.path is not set: .* --shape NAME"):
        ModelShape.from_dir(None)
    shared_expert = {**SHAPES["qwen3-30b-a3b"], "shared_expert_intermediate_size": 64}
    (tmp_path / "config.json").write_text(json.dumps(shared_expert))
    with pytest.raises(ConfigError, match="shared_expert_intermediate_size=64: .* routed experts alone"):
        ModelShape.from_dir(tmp_path)
