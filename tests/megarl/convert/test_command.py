"""`megarl convert` on launch scripts in the shapes verl users write (verl_scripts/): each converted recipe passes
`megarl train --dry-run`, and its resolved config means what verl's run meant, key by key."""

import io
import json
from functools import reduce
from pathlib import Path

import datasets
import pytest

from megarl.config import load_config
from megarl.convert.command import main as convert_main
from megarl.train import main as train_main
from tests.helpers import make_tokenizer

SCRIPTS = Path(__file__).parent / "verl_scripts"
COMMON_GRPO = {"algorithm.adv_estimator": "grpo", "algorithm.use_kl_in_reward": False, "actor.use_kl_loss": True,
               "actor.kl_loss_coef": 0.001, "actor.kl_loss_type": "low_var_kl", "actor.entropy_coeff": 0.0,
               "actor.optim.lr": 1e-6, "data.filter_overlong_prompts": True, "data.truncation": "error",
               "trainer.logger": ["console", "wandb"], "trainer.critic_warmup": 0, "trainer.nnodes": 1}
SEED_003 = {**COMMON_GRPO, "data.max_prompt_length": 512, "data.max_response_length": 1024,
            "actor.megatron.pipeline_model_parallel_size": 1, "actor.megatron.context_parallel_size": 1,
            # verl's megatron workers ignore enable_gradient_checkpointing; its megatron reference follows the
            # actor's param_offload (false)
            "actor.megatron.recompute_granularity": None, "ref.megatron.param_offload": False,
            "rollout.name": "sglang", "rollout.mode": "async", "rollout.gpu_memory_utilization": 0.5,
            "rollout.n": 8, "rollout.val_kwargs.do_sample": True, "trainer.project_name": "verl_grpo_xr1750",
            "trainer.save_freq": 50, "trainer.test_freq": 20, "trainer.total_epochs": 2,
            "data.train_files": ["./xr1-750/train.parquet"], "data.val_files": ["./xr1-750/test.parquet"]}
EXPECTED = {
    "qwen3_0_6b_grpo_megatron.sh": {
        **SEED_003, "data.train_batch_size": 4, "actor.ppo_mini_batch_size": 2,  # prompts, × rollout.n = 16 samples
        "actor.ppo_micro_batch_size_per_gpu": 2, "actor.log_prob_micro_batch_size_per_gpu": 2,
        "ref.log_prob_micro_batch_size_per_gpu": 2, "actor.megatron.tensor_model_parallel_size": 2,
        "rollout.tensor_model_parallel_size": 2, "trainer.n_gpus_per_node": 2, "actor.megatron.param_offload": False,
        "actor.megatron.optimizer_offload": False, "trainer.experiment_name": "qwen3_0dot6B_RL_Zero"},
    "qwen3_8b_grpo_megatron.sh": {
        **SEED_003, "data.train_batch_size": 8, "actor.ppo_mini_batch_size": 2, "actor.ppo_micro_batch_size_per_gpu": 2,
        "actor.log_prob_micro_batch_size_per_gpu": 2, "ref.log_prob_micro_batch_size_per_gpu": 2,
        "actor.megatron.tensor_model_parallel_size": 4, "rollout.tensor_model_parallel_size": 4,
        "trainer.n_gpus_per_node": 4, "actor.megatron.optimizer_offload": True, "actor.megatron.param_offload": False,
        "actor.megatron.grad_offload": False, "trainer.experiment_name": "qwen3_8B_RL_Zero"},
    "grpo_gsm8k_fsdp.sh": {
        **COMMON_GRPO, "data.train_batch_size": 1024, "data.max_prompt_length": 512, "data.max_response_length": 1024,
        "actor.ppo_mini_batch_size": 256, "actor.ppo_micro_batch_size_per_gpu": 32,
        "actor.log_prob_micro_batch_size_per_gpu": 32, "ref.log_prob_micro_batch_size_per_gpu": 32,
        "actor.megatron.recompute_granularity": "full",  # FSDP's enable_gradient_checkpointing
        "actor.megatron.param_offload": False, "actor.megatron.optimizer_offload": False,
        "ref.megatron.param_offload": True, "actor.megatron.tensor_model_parallel_size": 1,
        "rollout.name": "sglang", "rollout.tensor_model_parallel_size": 2, "rollout.gpu_memory_utilization": 0.6,
        "rollout.n": 5, "trainer.n_gpus_per_node": 8, "trainer.total_epochs": 15, "trainer.save_freq": 20,
        "trainer.test_freq": 5, "trainer.project_name": "verl_grpo_example_gsm8k",
        "trainer.experiment_name": "qwen3_8b_function_rm"},
    "ppo_gsm8k_math_fsdp.sh": {
        "algorithm.adv_estimator": "gae", "algorithm.use_kl_in_reward": False, "actor.use_kl_loss": False,
        "data.train_batch_size": 4096, "data.max_prompt_length": 4096, "data.max_response_length": 4096,
        "actor.ppo_mini_batch_size": 512, "critic.ppo_mini_batch_size": 512, "rollout.n": 1,
        # verl's global micro-batches over its data-parallel ranks: 8 GPUs / Ulysses 2 for the actor, 8 for the critic
        "actor.ppo_micro_batch_size_per_gpu": 32, "actor.log_prob_micro_batch_size_per_gpu": 64,
        "critic.ppo_micro_batch_size_per_gpu": 32,
        "actor.use_dynamic_bsz": True, "critic.use_dynamic_bsz": True, "actor.ppo_max_token_len_per_gpu": 24000,
        "actor.log_prob_max_token_len_per_gpu": 24000, "critic.ppo_max_token_len_per_gpu": 98304,
        "actor.megatron.context_parallel_size": 2, "critic.megatron.context_parallel_size": 2,
        "actor.megatron.param_offload": False, "actor.megatron.optimizer_offload": True,
        "critic.megatron.param_offload": False, "critic.megatron.optimizer_offload": False,
        "actor.megatron.recompute_granularity": "full", "critic.megatron.recompute_granularity": "full",
        "actor.optim.lr": 1e-6, "critic.optim.lr": 1e-5, "rollout.name": "sglang", "rollout.mode": "async",
        "rollout.tensor_model_parallel_size": 2, "rollout.gpu_memory_utilization": 0.5,
        "trainer.val_before_train": False, "trainer.n_gpus_per_node": 8, "trainer.total_epochs": 15},
    "ppo_gsm8k_math_megatron.sh": {
        "algorithm.adv_estimator": "gae", "algorithm.kl_ctrl.kl_coef": 0.001, "actor.use_kl_loss": False,
        "data.train_batch_size": 1024, "data.max_prompt_length": 1024, "data.max_response_length": 512,
        "actor.ppo_mini_batch_size": 256, "actor.ppo_micro_batch_size_per_gpu": 4,
        "actor.log_prob_micro_batch_size_per_gpu": 4, "critic.ppo_micro_batch_size_per_gpu": 4,
        "actor.megatron.tensor_model_parallel_size": 2, "actor.megatron.pipeline_model_parallel_size": 2,
        "critic.megatron.tensor_model_parallel_size": 2, "critic.megatron.pipeline_model_parallel_size": 2,
        "actor.megatron.recompute_granularity": None, "rollout.tensor_model_parallel_size": 4,
        "rollout.gpu_memory_utilization": 0.4, "rollout.name": "sglang", "critic.optim.lr": 1e-5,
        "trainer.n_gpus_per_node": 8, "trainer.total_epochs": 100},
}
NOT_CARRIED = {
    "qwen3_0_6b_grpo_megatron.sh": ["actor_rollout_ref.model.enable_gradient_checkpointing",
                                    "actor_rollout_ref.actor.megatron.use_mbridge",
                                    "actor_rollout_ref.rollout.load_format"],
    "qwen3_8b_grpo_megatron.sh": ["actor_rollout_ref.model.enable_gradient_checkpointing",
                                  "actor_rollout_ref.actor.megatron.use_mbridge",
                                  "actor_rollout_ref.rollout.load_format"],
    "grpo_gsm8k_fsdp.sh": [],
    "ppo_gsm8k_math_fsdp.sh": ["data.return_raw_chat"],
    "ppo_gsm8k_math_megatron.sh": [],
}

COMMENTED = {  # lines whose meaning changed carry a comment
    "qwen3_0_6b_grpo_megatron.sh": ["  param_offload: ${actor.megatron.param_offload}  # verl's default, as the "
                                    "actor's"],
    "qwen3_8b_grpo_megatron.sh": [],
    "grpo_gsm8k_fsdp.sh": ["  name: sglang  # verl: actor_rollout_ref.rollout.name=vllm; megarl generates with SGLang",
                           "  recompute_granularity: full  # verl: actor_rollout_ref.model.enable_gradient_"
                           "checkpointing=true; true is full recomputation"],
    "ppo_gsm8k_math_fsdp.sh": ["  ppo_micro_batch_size_per_gpu: 32  # verl: actor_rollout_ref.actor.ppo_micro_batch_"
                               "size=128; per data-parallel rank", "  context_parallel_size: 2  # verl: actor_rollout_"
                               "ref.actor.ulysses_sequence_parallel_size=2"],
    "ppo_gsm8k_math_megatron.sh": ["  tensor_model_parallel_size: 2  # the actor's (verl's: 1)"],
}


@pytest.fixture
def verl_machine(tmp_path, monkeypatch):
    """A working directory with the scripts' model (a config.json that splits over TP 4 and PP 2) and data, and
    the environment the scripts read ($HOME and the model variables)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2", "num_attention_heads": 8,
                                                   "num_key_value_heads": 4, "num_hidden_layers": 2,
                                                   "max_position_embeddings": 16384, "vocab_size": 512}))
    make_tokenizer(model)  # --dry-run loads the policy's tokenizer and checks it against the vocabulary
    row = {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "q"}],
           "reward_model": {"ground_truth": "1"}}
    for directory in ("xr1-750", "data/gsm8k", "data/math"):
        (tmp_path / directory).mkdir(parents=True)
        for split in ("train", "test"):
            datasets.Dataset.from_list([row]).to_parquet(str(tmp_path / directory / f"{split}.parquet"))
    monkeypatch.chdir(tmp_path)
    for name in ("HOME", "MODEL_PATH", "MODEL", "ACTOR_MODEL", "MODEL_DIR"):
        monkeypatch.setenv(name, str(model if name != "HOME" else tmp_path))
    return tmp_path


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_a_verl_script_converts_to_a_recipe_that_runs_with_verls_meaning(script, verl_machine, capsys):
    recipe = verl_machine / "recipe.yaml"
    assert convert_main([str(SCRIPTS / script), "--out", str(recipe)]) == 0
    report = capsys.readouterr().err
    for commented in COMMENTED[script]:
        assert commented in recipe.read_text(), commented
    assert train_main(["--recipe", str(recipe), "--dry-run"]) == 0, capsys.readouterr().err
    cfg = load_config(next(verl_machine.glob("outputs/*/*/config.yaml")))
    for key, expected in EXPECTED[script].items():
        assert reduce(getattr, key.split("."), cfg) == expected, key
    assert [line.split("=")[0] for line in _section(report, "not carried over")] == NOT_CARRIED[script], report


def _section(report: str, title: str) -> list[str]:
    """The indented lines under `title:` in convert's report."""
    lines = report.splitlines()
    start = lines.index(f"{title}:") + 1 if f"{title}:" in lines else len(lines)
    section = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        section.append(line.strip())
    return section


def test_overrides_from_arguments_or_standard_input(verl_machine, capsys, monkeypatch):
    overrides = ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2", "trainer.n_gpus_per_node=1",
                 "actor_rollout_ref.rollout.tensor_model_parallel_size=1"]
    assert convert_main(overrides) == 0
    from_arguments = capsys.readouterr().out
    assert "  n: 2\n" in from_arguments and "adv_estimator: grpo" in from_arguments
    monkeypatch.setattr("sys.stdin", io.StringIO(" \\\n".join(overrides) + "\n"))
    assert convert_main(["-"]) == 0
    assert capsys.readouterr().out == from_arguments.replace("the overrides", "standard input")
    assert convert_main(["no_such_script.sh"]) == 2
    assert "no_such_script.sh is no file" in capsys.readouterr().err
