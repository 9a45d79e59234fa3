"""`megarl init-model`: random-weight HF checkpoints of the recipes' shapes with a tokenizer built here."""

import pytest
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from megarl.cli import main as megarl
from megarl.models.shapes import SHAPES, hf_config
from megarl.plan.shape import ModelShape


def test_tiny_model_and_its_tokenizer(tmp_path):
    assert megarl(["init-model", "--shape", "tiny", "--out", str(tmp_path / "tiny")]) == 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tiny")
    assert sum(p.numel() for p in model.parameters()) == ModelShape.named("tiny").parameters
    assert model.config.eos_token_id == tokenizer.eos_token_id and model.config.pad_token_id == tokenizer.pad_token_id
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "12+7="}], add_generation_prompt=True,
                                           tokenize=False)
    assert prompt == "12+7="  # bare prompts: the tiny model's capacity goes to the task
    ids = tokenizer("#### 19", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == "#### 19" and max(ids) < model.config.vocab_size


def test_the_tiny_shape_as_a_mixture_of_experts(tmp_path, capsys):
    assert megarl(["init-model", "--shape", "tiny", "--experts", "4", "--out", str(tmp_path / "moe")]) == 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "moe")
    assert model.config.architectures == ["Qwen3MoeForCausalLM"]
    assert (model.config.num_experts, model.config.num_experts_per_tok) == (4, 2)
    assert model.model.layers[1].mlp.experts.gate_up_proj.shape[0] == 4  # every layer routes to experts
    with pytest.raises(SystemExit):
        megarl(["init-model", "--shape", "qwen3-0.6b", "--experts", "4", "--out", str(tmp_path / "no")])
    assert "--experts makes the tiny shape a mixture of experts" in capsys.readouterr().err


def test_a_real_shape_with_fewer_layers(tmp_path):
    assert megarl(["init-model", "--shape", "qwen3-0.6b", "--layers", "1", "--dtype", "bfloat16",
                   "--out", str(tmp_path / "m")]) == 0
    config = AutoConfig.from_pretrained(tmp_path / "m")
    assert config.architectures == ["Qwen3ForCausalLM"] and config.num_hidden_layers == 1
    assert (config.hidden_size, config.head_dim, config.vocab_size) == (1024, 128, 151936)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "m")
    assert "<|im_start|>assistant" in tokenizer.apply_chat_template([{"role": "user", "content": "hi"}],
                                                                    add_generation_prompt=True, tokenize=False)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_configs_name_their_architecture(shape):
    assert hf_config(shape).architectures[0].endswith("ForCausalLM")
