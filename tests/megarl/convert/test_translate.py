from megarl.config import load_config
from megarl.convert.recipe_yaml import recipe_yaml
from megarl.convert.translate import convert

MEGATRON = "ppo_megatron_trainer"


def values(conversion) -> dict:
    return {key: line.value for key, line in conversion.lines.items()}


def test_fsdp_settings_become_their_megatron_counterparts_and_vllm_sglang():
    c = convert(["actor_rollout_ref.actor.fsdp_config.param_offload=True",
                 "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
                 "actor_rollout_ref.ref.fsdp_config.param_offload=False",
                 "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
                 "actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.actor.fsdp_config.fsdp_size=4",
                 "actor_rollout_ref.model.enable_gradient_checkpointing=False",
                 "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.n=4"])
    got = values(c)
    assert (got["actor.megatron.param_offload"], got["actor.megatron.optimizer_offload"],
            got["ref.megatron.param_offload"], got["actor.megatron.context_parallel_size"]) == (True, True, False, 2)
    assert got["actor.megatron.recompute_granularity"] is None and got["rollout.name"] == "sglang"
    assert c.lines["rollout.name"].comment == "verl: actor_rollout_ref.rollout.name=vllm; megarl generates with SGLang"
    assert "rollout.n" in got and c.lines["rollout.n"].comment == ""  # the same key, the same meaning
    assert c.changed == [
        "actor_rollout_ref.model.enable_gradient_checkpointing=false → actor.megatron.recompute_granularity=null: "
        "true is full recomputation",
        "actor_rollout_ref.rollout.name=vllm → rollout.name=sglang: megarl generates with SGLang",
        # verl's default estimator is GAE: a critic runs, beside the actor, in its layout
        "critic.megatron.context_parallel_size=1 → 2: a critic beside the actor shares its processes, so its layout"]
    assert [line.split(":")[0] for line in c.dropped] == ["actor_rollout_ref.actor.strategy=fsdp2",
                                                         "actor_rollout_ref.actor.fsdp_config.fsdp_size=4"]


def test_global_micro_batches_become_per_gpu_ones_over_verls_data_parallel_size():
    megatron = convert(["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                        "actor_rollout_ref.actor.ppo_micro_batch_size=64",  # 8 GPUs (verl's default) / TP 2 = 4 ranks
                        "actor_rollout_ref.ref.log_prob_micro_batch_size=32"], MEGATRON)
    assert values(megatron)["actor.ppo_micro_batch_size_per_gpu"] == 16
    assert values(megatron)["ref.log_prob_micro_batch_size_per_gpu"] == 8
    fsdp = convert(["trainer.nnodes=2", "trainer.n_gpus_per_node=4", "critic.ulysses_sequence_parallel_size=2",
                    "critic.ppo_micro_batch_size=64", "actor_rollout_ref.rollout.log_prob_micro_batch_size=64"])
    assert values(fsdp)["critic.ppo_micro_batch_size_per_gpu"] == 16  # 8 GPUs / Ulysses 2
    assert values(fsdp)["actor.log_prob_micro_batch_size_per_gpu"] == 8


def test_values_that_need_the_rest_of_the_run():
    got = values(convert(["custom_reward_function.path=/r.py", "custom_reward_function.name=my_score",
                          "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.1",
                          "trainer.total_training_steps=50"]))
    assert (got["reward.function"], got["actor.optim.lr_warmup_steps"]) == ("/r.py:my_score", 5)
    c = convert(["custom_reward_function.path=/r.py", "critic.optim.lr_warmup_steps_ratio=0.1"])
    assert values(c)["reward.function"] == "/r.py:compute_score"
    assert c.dropped[0].startswith("critic.optim.lr_warmup_steps_ratio=0.1: megarl counts warmup in steps")
    dropped = convert(["custom_reward_function.name=my_score"]).dropped
    assert dropped == ["custom_reward_function.name=my_score: verl reads it only with custom_reward_function.path"]


def test_the_reference_keeps_the_actors_mesh():
    same = convert(["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                    "actor_rollout_ref.ref.megatron.tensor_model_parallel_size=2"], MEGATRON)
    assert same.dropped == [] and values(same)["actor.megatron.tensor_model_parallel_size"] == 2
    other = convert(["actor_rollout_ref.ref.megatron.pipeline_model_parallel_size=2"], MEGATRON)
    assert other.dropped == ["actor_rollout_ref.ref.megatron.pipeline_model_parallel_size=2: the reference runs in "
                             "the actor's processes, in the actor's megatron layout; verl's reference had its own"]


def test_experts_keep_verls_expert_parallelism_and_the_layers_tensor_parallelism():
    moe = convert(["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                   "actor_rollout_ref.actor.megatron.expert_model_parallel_size=4",
                   "actor_rollout_ref.ref.megatron.expert_model_parallel_size=4",
                   "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=2"], MEGATRON)
    assert moe.dropped == [] and values(moe)["actor.megatron.expert_model_parallel_size"] == 4
    other = convert(["actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=1",
                     "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"], MEGATRON)
    assert other.dropped == ["actor_rollout_ref.actor.megatron.expert_tensor_parallel_size=1: megarl's experts are "
                             "split over the layers' tensor-parallel ranks (megatron's default); verl's run split "
                             "them over 1"]


def test_what_does_not_carry_over_is_named_with_the_reason():
    c = convert(["actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
                 "actor_rollout_ref.actor.use_dynamic_bsz=False",
                 "~actor_rollout_ref.rollout.engine_kwargs", "actor_rollout_ref.rollout.skip_tokenizer_init=True",
                 "actor_rollout_ref.model.use_remove_padding=True", "critic.model.use_remove_padding=False",
                 "++actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=triton", "not_an_override",
                 'data.train_files="a"/b.parquet'])
    assert c.dropped == [
        "~actor_rollout_ref.rollout.engine_kwargs: Hydra's delete; a megarl recipe leaves out what it does not set",
        "not_an_override: not a key=value override",
        "data.train_files=\"a\"/b.parquet: the value '\"a\"/b.parquet' is not one YAML value (did not find expected "
        "<document start>): quote it",
        "actor_rollout_ref.actor.use_dynamic_bsz=false: actor.use_dynamic_bsz is already true from "
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
        "actor_rollout_ref.rollout.skip_tokenizer_init=true: megarl has no rollout.skip_tokenizer_init "
        "(`megarl train --help-keys` lists its keys)",
        "critic.model.use_remove_padding=false: megarl always packs sequences, without padding",
    ]
    assert values(c)["rollout.engine_kwargs.attention_backend"] == "triton"


def test_gradient_checkpointing_follows_what_verls_workers_do():
    megatron = convert(["actor_rollout_ref.model.enable_gradient_checkpointing=True"], MEGATRON)
    assert megatron.dropped[0].startswith("actor_rollout_ref.model.enable_gradient_checkpointing=true: verl's "
                                          "megatron workers ignore it")
    assert "actor.megatron.recompute_granularity" not in megatron.lines
    assert convert([]).lines["actor.megatron.recompute_granularity"].value == "full"  # FSDP's default: on


def test_verls_defaults_are_stated_where_megarls_differ(tmp_path):
    c = convert(["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=4",
                 "actor_rollout_ref.actor.use_kl_loss=True",
                 "actor_rollout_ref.actor.megatron.param_offload=True", "actor_rollout_ref.model.path=Qwen/Qwen3-8B"],
                MEGATRON)
    assert c.defaults == ["data.train_batch_size", "actor.ppo_mini_batch_size", "rollout.tensor_model_parallel_size",
                          "trainer.total_epochs", "trainer.n_gpus_per_node", "trainer.logger",
                          "trainer.project_name", "trainer.experiment_name", "ref.megatron.param_offload"]
    assert c.lines["data.train_batch_size"].comment == "verl's default, 1024 (megarl's: 64)"
    assert c.notes == ["model.path=Qwen/Qwen3-8B is a Hugging Face name: megarl reads a local directory and downloads "
                       "nothing; download the model and point model.path at it"]
    recipe = tmp_path / "r.yaml"
    recipe.write_text(recipe_yaml(c.lines, ["a header"]))
    cfg = load_config(recipe)
    assert cfg.ref.megatron.param_offload is True  # verl's megatron reference follows the actor's param_offload
    assert (cfg.data.train_batch_size, cfg.actor.ppo_mini_batch_size, cfg.trainer.n_gpus_per_node) == (1024, 256, 8)
    assert "critic" not in recipe.read_text()  # GRPO runs no critic: its defaults are not stated


def test_a_critic_beside_the_actor_takes_its_mesh():
    c = convert(["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                 "critic.megatron.tensor_model_parallel_size=1"], MEGATRON)
    assert values(c)["critic.megatron.tensor_model_parallel_size"] == 2
    assert c.changed == ["critic.megatron.tensor_model_parallel_size=1 → 2: a critic beside the actor shares its "
                         "processes, so its layout"]


def test_recipe_yaml_nests_in_the_schemas_order_with_comments():
    c = convert(["trainer.nnodes=1", "actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=triton",
                 "actor_rollout_ref.rollout.name=vllm", "data.train_files=/d/train.parquet",
                 "actor_rollout_ref.actor.optim.lr=2e-6"], MEGATRON)
    text = recipe_yaml({k: c.lines[k] for k in ("trainer.nnodes", "rollout.engine_kwargs.attention_backend",
                                                 "rollout.name", "data.train_files", "actor.optim.lr")}, ["head"])
    assert text == """# head
data:
  train_files: [/d/train.parquet]
actor:
  optim:
    lr: 2.0e-06
rollout:
  name: sglang  # verl: actor_rollout_ref.rollout.name=vllm; megarl generates with SGLang
  engine_kwargs:
    attention_backend: triton
trainer:
  nnodes: 1
"""


def test_a_lora_run_keeps_what_megarl_lora_can():
    c = convert(["actor_rollout_ref.model.lora_rank=32", "actor_rollout_ref.model.target_modules=all-linear",
                 "actor_rollout_ref.actor.fsdp_config.param_offload=True",
                 "actor_rollout_ref.ref.fsdp_config.param_offload=False", "actor_rollout_ref.actor.use_kl_loss=True"])
    assert values(c)["actor.lora.target_modules"] == ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    assert "ref.megatron.param_offload" not in c.lines  # a LoRA actor is its own reference
    assert c.dropped == ["actor_rollout_ref.actor.fsdp_config.param_offload=true: megarl does not offload a LoRA "
                         "actor's frozen base weights (they are not in megatron's parameter buffers)"]
    hf_names = convert(["actor_rollout_ref.model.lora.target_modules=[q_proj,k_proj,v_proj,down_proj]"])
    assert values(hf_names)["actor.lora.target_modules"] == ["linear_qkv", "linear_fc2"]


def test_an_empty_value_keeps_megarls_default_where_null_is_no_value():
    c = convert(["trainer.nnodes=", "data.val_batch_size=", "trainer.n_gpus_per_node=4"])
    assert c.dropped == ["trainer.nnodes=null: empty (as an unset variable leaves it); megarl keeps its default"]
    assert values(c)["data.val_batch_size"] is None


def test_verls_sandbox_fusion_limits_become_the_local_sandboxs():
    c = convert(["reward_model.sandbox_fusion.max_concurrent=16", "reward_model.sandbox_fusion.memory_limit_mb=512",
                 "reward_model.sandbox_fusion.url=http://10.0.0.1:8080/run_code"])
    assert values(c)["reward.sandbox.workers"] == 16 and values(c)["reward.sandbox.memory_mb"] == 512
    assert c.dropped == ["reward_model.sandbox_fusion.url=http://10.0.0.1:8080/run_code: megarl runs code-reward "
                         "tests in a local sandbox (bubblewrap, reward.sandbox.*), no service"]


def test_verls_multi_turn_keys_become_the_agent_loops():
    c = convert(["actor_rollout_ref.rollout.multi_turn.enable=true",
                 "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
                 "actor_rollout_ref.rollout.multi_turn.format=hermes",
                 "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=256",
                 "actor_rollout_ref.rollout.multi_turn.max_parallel_calls=1",
                 "actor_rollout_ref.rollout.multi_turn.tool_config_path=tools.yaml"])
    assert {k: v for k, v in values(c).items() if k.startswith("rollout.multi_turn")} == {
        "rollout.multi_turn.enable": True, "rollout.multi_turn.max_assistant_turns": 3,
        "rollout.multi_turn.format": "hermes", "rollout.multi_turn.max_tool_response_length": 256}
    assert len(c.dropped) == 1 and c.dropped[0].startswith("actor_rollout_ref.rollout.multi_turn.tool_config_path=")


def test_verls_profiler_tool_carries_where_megarl_has_it():
    assert values(convert(["global_profiler.tool=torch_memory"]))["trainer.profile_tool"] == "torch_memory"
    assert convert(["global_profiler.tool=nsys"]).dropped == [
        "global_profiler.tool=nsys: megarl records with torch or torch_memory, not nsys"]
