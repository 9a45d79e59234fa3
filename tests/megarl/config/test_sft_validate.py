import json

import pytest

from megarl.config import SFT_RECIPE, ConfigError, SFTConfig, describe_keys, load_config, save_config


def load(*overrides, recipe=None):
    return load_config(recipe, list(overrides), SFT_RECIPE)


def problems(*overrides):
    with pytest.raises(ConfigError) as info:
        load(*overrides)
    return info.value.problems


def one_problem(*overrides):
    found = problems(*overrides)
    assert len(found) == 1, found
    return found[0]


def test_defaults_are_verl_sft_ones_and_a_saved_config_reloads(tmp_path):
    cfg = load()
    assert isinstance(cfg, SFTConfig)
    assert (cfg.optim.lr, cfg.optim.lr_decay_style) == (1e-5, "cosine")
    assert (cfg.data.prompt_key, cfg.data.response_key) == ("prompt", "extra_info.answer")
    assert cfg.trainer.output_dir == "outputs/megarl/sft" and cfg.dp_size == 1
    cfg = load("data.train_files=[a.parquet]", "actor.megatron.tensor_model_parallel_size=2",
               "trainer.n_gpus_per_node=4", "data.train_batch_size=8")
    assert cfg.dp_size == 2
    assert load(recipe=save_config(cfg, tmp_path)) == cfg
    assert "data.response_key = extra_info.answer" in describe_keys(SFT_RECIPE)


def test_verl_and_rl_spellings_point_at_the_sft_key():
    found = problems("model.partial_pretrain=/m", "actor.optim.lr=1e-5", "data.prompt_dict_keys=[question]",
                     "data.nope=1")
    assert found == [
        "override: unknown key 'model.partial_pretrain'. That is verl's name; in megarl it is model.path.",
        "override: unknown key 'actor.optim.lr'. Did you mean optim.lr?",
        "override: unknown key 'data.prompt_dict_keys'. That is verl's name; in megarl it is data.prompt_key "
        "(a dotted path into the column, e.g. extra_info.question).",
        "override: unknown key 'data.nope'. See `megarl sft --help-keys` for every key.",
    ]


def test_batches_must_split_over_data_parallel_ranks_and_micro_batches():
    msg = one_problem("trainer.n_gpus_per_node=4", "data.train_batch_size=6")
    assert msg == ("data.train_batch_size=6 cannot be split over 4 data-parallel ranks (GPUs / model-parallel "
                   "size): make it a multiple of 4")
    msg = one_problem("trainer.n_gpus_per_node=2", "data.train_batch_size=12", "data.micro_batch_size_per_gpu=4")
    assert msg == ("data.micro_batch_size_per_gpu=4 does not divide the 6 samples each data-parallel rank gets per "
                   "step: use one of 1, 2, 3, 6, or data.use_dynamic_bsz=true")
    load("trainer.n_gpus_per_node=2", "data.train_batch_size=12", "data.micro_batch_size_per_gpu=4",
         "data.use_dynamic_bsz=true")
    msg = one_problem("trainer.n_gpus_per_node=4", "actor.megatron.tensor_model_parallel_size=3")
    assert "tensor × pipeline × context parallel = 3 does not divide the 4 GPUs" in msg


def test_choices_and_sizes():
    found = problems("data.truncation=middle", "optim.lr_decay_style=cosin", "trainer.logger=[consol]",
                     "data.max_length=0", "data.micro_batch_size_per_gpu=0")
    assert found[0].startswith("data.truncation='middle' is not one of: error, left, right")
    assert "Did you mean 'cosine'?" in found[1] and "Did you mean 'console'?" in found[2]
    assert found[3:] == ["data.max_length=0 must be at least 1", "data.micro_batch_size_per_gpu=0 must be at least 1"]


def test_optimizer_ranges():
    found = problems("optim.lr=-1", "optim.betas=[0.9,1.0]", "optim.weight_decay=-1")
    assert found == ["optim.lr=-1.0 must be > 0", "optim.weight_decay=-1.0 must be ≥ 0",
                     "optim.betas[1]=1.0 must be in [0, 1)"]


def test_checks_against_the_model_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3", "num_attention_heads": 4,
                                                      "num_key_value_heads": 2, "num_hidden_layers": 2,
                                                      "max_position_embeddings": 256}))
    found = problems(f"model.path={tmp_path}", "data.max_length=512", "trainer.n_gpus_per_node=4",
                     "data.train_batch_size=4", "actor.megatron.tensor_model_parallel_size=4")
    assert "actor.megatron.tensor_model_parallel_size=4 must divide the model's 4 attention heads and 2" in found[0]
    assert found[1] == (f"data.max_length=512 exceeds the model's max_position_embeddings=256 "
                        f"({tmp_path}/config.json)")


def test_offloads_are_accepted_as_in_rl_recipes():
    cfg = load("actor.megatron.param_offload=true", "actor.megatron.grad_offload=true",
               "actor.megatron.optimizer_offload=true")
    assert cfg.actor.megatron.param_offload and cfg.actor.megatron.grad_offload
