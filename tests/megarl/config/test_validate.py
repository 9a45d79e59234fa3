import json

import pytest

from megarl.config import ConfigError, load_config


def problems(*overrides):
    with pytest.raises(ConfigError) as info:
        load_config(overrides=list(overrides))
    return info.value.problems


def one_problem(*overrides):
    found = problems(*overrides)
    assert len(found) == 1, found
    return found[0]


def test_mini_batch_must_divide_batch():
    msg = one_problem("data.train_batch_size=64", "actor.ppo_mini_batch_size=48")
    assert msg == "actor.ppo_mini_batch_size=48 does not divide data.train_batch_size=64: use one of 1, 2, 4, 8, 16, 32, 64"


def test_micro_batch_must_divide_per_rank_samples_unless_dynamic():
    base = ["trainer.n_gpus_per_node=4", "data.train_batch_size=8", "actor.ppo_mini_batch_size=4", "rollout.n=3"]
    msg = one_problem(*base, "actor.ppo_micro_batch_size_per_gpu=2")
    assert "does not divide the 3 samples each data-parallel rank gets" in msg and "use_dynamic_bsz=true" in msg
    load_config(overrides=[*base, "actor.ppo_micro_batch_size_per_gpu=2", "actor.use_dynamic_bsz=true"])
    load_config(overrides=[*base, "actor.ppo_micro_batch_size_per_gpu=3"])


def test_samples_must_split_over_data_parallel_ranks():
    msg = one_problem("trainer.n_gpus_per_node=4", "rollout.tensor_model_parallel_size=2", "data.train_batch_size=6",
                      "actor.ppo_mini_batch_size=3")
    assert "3 samples cannot be split over 4 data-parallel ranks" in msg


def test_model_parallel_must_divide_world_and_rollout_tp_a_node():
    grpo = ["algorithm.adv_estimator=grpo", "rollout.n=2"]
    msg = one_problem(*grpo, "trainer.n_gpus_per_node=4", "actor.megatron.tensor_model_parallel_size=3")
    assert "= 3 does not divide the 4 GPUs (trainer.nnodes × trainer.n_gpus_per_node)" in msg
    msg = one_problem("trainer.n_gpus_per_node=4", "rollout.tensor_model_parallel_size=3")
    assert "rollout.tensor_model_parallel_size=3 must divide trainer.n_gpus_per_node=4" in msg


def test_rollout_and_training_tp_divide_one_another():
    grpo = ["algorithm.adv_estimator=grpo", "rollout.n=3", "trainer.n_gpus_per_node=6", "data.train_batch_size=96"]
    msg = one_problem(*grpo, "rollout.tensor_model_parallel_size=3", "actor.megatron.tensor_model_parallel_size=2")
    assert "rollout.tensor_model_parallel_size=3 and actor.megatron.tensor_model_parallel_size=2 must divide" in msg
    load_config(overrides=[*grpo, "rollout.tensor_model_parallel_size=1", "actor.megatron.tensor_model_parallel_size=2"])


def test_colocated_critic_shares_the_actors_mesh():
    msg = one_problem("trainer.n_gpus_per_node=2", "actor.megatron.tensor_model_parallel_size=2")
    assert "critic.megatron.tensor_model_parallel_size=2" in msg and "critic.enable_resource_pool=true" in msg


def test_a_reward_model_shares_the_actors_mesh_and_some_reward_is_left():
    msg = one_problem("reward.model.path=rm", "reward.model.megatron.context_parallel_size=2",
                      "trainer.n_gpus_per_node=2")
    assert msg == ("the reward model runs in the actor's processes and so its megatron mesh: set "
                   "reward.model.megatron.context_parallel_size=1, or give it its own GPUs with "
                   "reward.model.enable_resource_pool=true (Ray launcher)")
    assert "leaves no reward without a reward model" in one_problem("reward.rule_weight=0")
    assert "reward.rule_weight=-1.0 must be ≥ 0" in one_problem("reward.rule_weight=-1.0")
    assert load_config(overrides=["reward.model.path=rm", "reward.rule_weight=0"]).reward.rule_weight == 0


def test_a_reward_model_in_its_own_pool_has_its_own_mesh():
    own_pool = ["reward.model.path=rm", "reward.model.enable_resource_pool=true", "reward.model.n_gpus_per_node=2",
                "reward.model.megatron.tensor_model_parallel_size=2", "trainer.n_gpus_per_node=1"]
    cfg = load_config(overrides=own_pool)
    assert (cfg.reward_model_world_size, cfg.gpus) == (2, 3)
    msg = one_problem(*own_pool[:3], "reward.model.megatron.tensor_model_parallel_size=4")
    assert "= 4 does not divide the 2 GPUs (reward.model.nnodes × reward.model.n_gpus_per_node)" in msg
    assert "reward.model.enable_resource_pool=true needs trainer.launcher=ray" in one_problem(
        *own_pool, "trainer.launcher=torchrun")


def test_critic_in_its_own_pool():
    own_pool = ["critic.enable_resource_pool=true", "critic.n_gpus_per_node=2",
                "critic.megatron.tensor_model_parallel_size=2", "trainer.n_gpus_per_node=2"]
    cfg = load_config(overrides=own_pool)
    assert (cfg.world_size, cfg.critic_world_size, cfg.dp_size("actor"), cfg.dp_size("critic")) == (2, 2, 2, 1)
    assert cfg.gpus == 4 and load_config(overrides=own_pool[3:]).gpus == 2  # colocated: the actor's GPUs
    msg = one_problem(*own_pool[:2], "critic.megatron.tensor_model_parallel_size=3")
    assert "= 3 does not divide the 2 GPUs (critic.nnodes × critic.n_gpus_per_node)" in msg
    msg = one_problem(*own_pool, "trainer.launcher=torchrun")
    assert "needs trainer.launcher=ray" in msg
    assert "trainer.launcher='slurm' is not one of: auto, ray, torchrun" in one_problem("trainer.launcher=slurm")


def test_critic_is_checked_only_when_used_and_when_it_differs():
    bad_critic = ["critic.ppo_mini_batch_size=5"]
    assert "critic.ppo_mini_batch_size=5" in one_problem(*bad_critic)
    load_config(overrides=[*bad_critic, "algorithm.adv_estimator=grpo", "rollout.n=2"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.truncation=midle", "data.truncation='midle' is not one of: error, left, right, middle. Did you mean 'middle'?"),
        ("algorithm.adv_estimator=ppo", "algorithm.adv_estimator='ppo' is not one of: gae, grpo"),
        ("actor.loss_agg_mode=token_mean", "Did you mean 'token-mean'"),
        ("actor.kl_loss_type=k4", "actor.kl_loss_type='k4'"),
        ("trainer.logger=[console,mlflow]", "trainer.logger='mlflow'"),
        ("rollout.name=vllm", "rollout.name='vllm' is not one of: sglang, transformers"),
        ("rollout.mode=agent", "rollout.mode='agent' is not one of: sync, async"),
        ("actor.megatron.recompute_granularity=some", "recompute_granularity='some'"),
        ("actor.clip_ratio_c=1.0", "actor.clip_ratio_c=1.0 must be > 1 (the dual-clip bound)"),
        ("rollout.gpu_memory_utilization=1.5", "must be in (0, 1)"),
        ("data.max_prompt_length=0", "data.max_prompt_length=0 must be at least 1"),
        ("trainer.log_interval=0", "trainer.log_interval=0 must be at least 1"),
        ("trainer.resume_mode=resume_path", "needs trainer.resume_from_path"),
        ("reward.function=missing_file.py:fn", "file missing_file.py does not exist"),
        ("reward.function=no_colon", "write it as"),
        ("actor.optim.betas=[0.9]", "must be two numbers"),
        # numeric ranges, each one line
        ("actor.optim.lr=-1", "actor.optim.lr=-1.0 must be > 0"),
        ("critic.optim.lr=0", "critic.optim.lr=0.0 must be > 0"),
        ("actor.optim.lr=nan", "actor.optim.lr=nan must be a finite number"),
        ("actor.optim.min_lr=-1e-7", "actor.optim.min_lr=-1e-07 must be in [0, actor.optim.lr=1e-06]"),
        ("actor.optim.min_lr=nan", "actor.optim.min_lr=nan must be in [0, actor.optim.lr=1e-06]"),
        ("actor.optim.min_lr=1e-5", "actor.optim.min_lr=1e-05 must be in [0, actor.optim.lr=1e-06]"),
        ("actor.optim.weight_decay=-0.1", "actor.optim.weight_decay=-0.1 must be ≥ 0"),
        ("actor.optim.betas=[0.9,1.5]", "actor.optim.betas[1]=1.5 must be in [0, 1)"),
        ("critic.optim.betas=[-0.1,0.99]", "critic.optim.betas[0]=-0.1 must be in [0, 1)"),
        ("actor.optim.clip_grad=-1", "actor.optim.clip_grad=-1.0 must be ≥ 0 (0: no clipping)"),
        ("actor.optim.lr_warmup_steps=-5", "actor.optim.lr_warmup_steps=-5 must be ≥ 0"),
        ("actor.clip_ratio_low=inf", "actor.clip_ratio_low=inf must be a finite number"),
        ("actor.clip_ratio_high=nan", "actor.clip_ratio_high=nan must be a finite number"),
        ("actor.kl_loss_coef=-0.1", "actor.kl_loss_coef=-0.1 must be ≥ 0"),
        ("actor.entropy_coeff=nan", "actor.entropy_coeff=nan must be a finite number"),
        ("critic.cliprange_value=0", "critic.cliprange_value=0.0 must be > 0"),
        ("algorithm.gamma=1.5", "algorithm.gamma=1.5 must be in [0, 1]"),
        ("algorithm.lam=-0.5", "algorithm.lam=-0.5 must be in [0, 1]"),
        ("algorithm.kl_ctrl.kl_coef=-1", "algorithm.kl_ctrl.kl_coef=-1.0 must be ≥ 0"),
        ("rollout.temperature=-1", "rollout.temperature=-1.0 must be ≥ 0 (0: greedy)"),
        ("rollout.top_p=0", "rollout.top_p=0.0 must be in (0, 1]"),
        ("rollout.top_k=0", "rollout.top_k=0 must be -1 (off) or ≥ 1"),
        ("rollout.val_kwargs.top_p=1.5", "rollout.val_kwargs.top_p=1.5 must be in (0, 1]"),
        ("reward.model.weight=nan", "reward.model.weight=nan must be a finite number"),
    ],
)
def test_bad_values(override, message):
    assert message in one_problem(override)


def test_transformer_impl_is_a_choice_and_transformer_engine_must_be_importable():
    assert load_config().actor.megatron.transformer_impl == "auto"
    assert "actor.megatron.transformer_impl='te' is not one of: auto, local, transformer_engine" in one_problem(
        "actor.megatron.transformer_impl=te")
    assert one_problem("critic.megatron.transformer_impl=transformer_engine").startswith(
        "critic.megatron.transformer_impl=transformer_engine needs Transformer Engine, which is not importable here")
    assert one_problem("reward.model.path=rm", "reward.model.megatron.transformer_impl=local", "reward.rule_weight=0",
                       "reward.model.megatron.transformer_impl=tev").startswith(
        "reward.model.megatron.transformer_impl='tev' is not one of")
    lora = problems("actor.lora.rank=8", "actor.megatron.transformer_impl=transformer_engine")
    assert any(p.startswith("actor.megatron.transformer_impl=transformer_engine does not apply to a LoRA actor")
               for p in lora)


def test_group_estimators_need_several_samples():
    msg = one_problem("algorithm.adv_estimator=grpo", "rollout.n=1")
    assert "set rollout.n ≥ 2" in msg
    load_config(overrides=["algorithm.adv_estimator=grpo", "rollout.n=2"])
    load_config(overrides=["algorithm.adv_estimator=reinforce_plus_plus", "rollout.n=1"])


def test_adaptive_kl_needs_target_and_horizon():
    assert "kl_ctrl.target_kl > 0" in one_problem("algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.target_kl=0")


def test_every_problem_is_reported_at_once():
    found = problems("data.truncation=x", "rollout.n=0", "actor.clip_ratio_c=0.5")
    assert len(found) == 3


@pytest.fixture
def model_dir(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "qwen2", "num_attention_heads": 14, "num_key_value_heads": 2,
                    "num_hidden_layers": 28, "max_position_embeddings": 2048})
    )
    return tmp_path


def test_parallel_sizes_must_fit_the_model(model_dir):
    world = ["trainer.n_gpus_per_node=8", "data.train_batch_size=64", f"model.path={model_dir}",
             "algorithm.adv_estimator=grpo", "rollout.n=2"]
    msg = one_problem(*world, "actor.megatron.tensor_model_parallel_size=4")
    assert "must divide the model's 14 attention heads and 2 key/value heads" in msg and "use one of 1, 2" in msg
    msg = one_problem(*world, "actor.megatron.pipeline_model_parallel_size=8")
    assert "must divide the model's 28 layers" in msg
    msg = one_problem(*world, "rollout.tensor_model_parallel_size=4")
    assert "rollout.tensor_model_parallel_size=4 must divide the model's 14 attention heads and 2 key/value" in msg
    msg = one_problem(*world, "data.max_prompt_length=1024", "data.max_response_length=1500")
    assert "2524 exceeds the model's max_position_embeddings=2048" in msg
    load_config(overrides=[*world, "actor.megatron.tensor_model_parallel_size=2", "rollout.tensor_model_parallel_size=2"])


@pytest.mark.parametrize("config", [
    {"model_type": "gpt2", "n_head": 12, "n_layer": 12, "vocab_size": 50257},
    {"model_type": "mistral", "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
     "sliding_window": 4096},
    {"num_attention_heads": 4, "num_hidden_layers": 2},
])
def test_an_architecture_megarl_does_not_build_is_refused_naming_the_ones_it_does(tmp_path, config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    found = config.get("model_type")
    assert one_problem(f"model.path={tmp_path}") == (
        f"model.path={tmp_path}: model_type {found!r} ({tmp_path}/config.json) is not an architecture megarl builds "
        "(llama, qwen2, qwen3, qwen3_moe): start from a checkpoint of one of those families")
    reward_model = one_problem(f"reward.model.path={tmp_path}", "algorithm.adv_estimator=grpo", "rollout.n=2")
    assert reward_model.startswith(f"reward.model.path={tmp_path}: model_type {found!r}")


def test_critic_model_is_checked_when_it_differs(model_dir, tmp_path_factory):
    other = tmp_path_factory.mktemp("critic")
    (other / "config.json").write_text(json.dumps({"model_type": "llama", "num_attention_heads": 6,
                                                    "num_hidden_layers": 4}))
    msg = one_problem("trainer.n_gpus_per_node=4", "data.train_batch_size=64", f"model.path={model_dir}",
                      f"critic.model.path={other}", "critic.megatron.tensor_model_parallel_size=4",
                      "critic.enable_resource_pool=true")
    assert msg.startswith("critic.megatron.tensor_model_parallel_size=4 must divide the model's 6 attention heads")


def test_critic_and_reference_sizes_are_checked_when_those_roles_run():
    assert "critic.forward_micro_batch_size_per_gpu=0" in one_problem("critic.forward_micro_batch_size_per_gpu=0")
    load_config(overrides=["critic.forward_micro_batch_size_per_gpu=0", "algorithm.adv_estimator=remax"])
    msg = one_problem("actor.use_kl_loss=true", "ref.log_prob_micro_batch_size_per_gpu=0")
    assert msg == "ref.log_prob_micro_batch_size_per_gpu=0 must be at least 1"


def test_offloads_load_for_every_trained_role():
    cfg = load_config(overrides=["actor.megatron.param_offload=true", "critic.megatron.grad_offload=true",
                                 "actor.megatron.optimizer_offload=true"])
    assert cfg.actor.megatron.param_offload and cfg.critic.megatron.grad_offload and cfg.actor.megatron.optimizer_offload


def test_prompts_must_be_shared_among_the_rollout_engines():
    msg = one_problem("trainer.n_gpus_per_node=4", "data.train_batch_size=6", "actor.ppo_mini_batch_size=2",
                      "rollout.n=2")
    assert msg.startswith("data.train_batch_size=6 prompts cannot be shared among the 4 rollout engines")


def test_dynamic_sampling_settings():
    dapo = ["algorithm.adv_estimator=grpo", "rollout.n=4", "algorithm.filter_groups.enable=true",
            "actor.ppo_mini_batch_size=8"]
    load_config(overrides=[*dapo, "data.train_batch_size=8", "data.gen_batch_size=24"])
    assert "algorithm.filter_groups.metric='score' is not one of: acc, seq_reward" in one_problem(
        *dapo, "algorithm.filter_groups.metric=score")
    assert "set rollout.n ≥ 2" in one_problem("algorithm.filter_groups.enable=true", "rollout.n=1")
    assert "which only dynamic sampling allows" in one_problem("data.train_batch_size=32", "data.gen_batch_size=64")
    assert one_problem("reward.overlong_buffer.enable=true", "data.max_response_length=64",
                       "reward.overlong_buffer.len=65").startswith("reward.overlong_buffer.len=65 must be in [1, ")


def test_rollout_correction_levels_and_bounds():
    key = "algorithm.rollout_correction"
    assert one_problem(f"{key}.rollout_is=seq").startswith(f"{key}.rollout_is='seq' is not one of: token, sequence")
    assert "must satisfy 0 < lower ≤ upper" in one_problem(f"{key}.rollout_rs=token", f"{key}.rollout_rs_threshold=2",
                                                           f"{key}.rollout_rs_threshold_lower=3")
    correction = load_config(overrides=[f"{key}.rollout_rs=token", f"{key}.rollout_is_threshold=4"]).algorithm
    assert (correction.rollout_correction.rs_upper, correction.rollout_correction.rs_lower) == (4.0, 0.25)


def test_without_the_engines_log_probs_nothing_may_read_them():
    off = "rollout.calculate_log_probs=false"
    assert not load_config(overrides=[off]).rollout.calculate_log_probs
    found = one_problem(off, "rollout.max_logprob_mult_error=1.05", "algorithm.rollout_correction.rollout_is=token",
                        "trainer.health.stop_on=[logprob_mismatch]")
    assert found.startswith("rollout.calculate_log_probs=false leaves the engine's log-probs out, but ")
    for reader in ("rollout.max_logprob_mult_error", "algorithm.rollout_correction", "logprob_mismatch"):
        assert reader in found
    load_config(overrides=["rollout.max_logprob_mult_error=1.05", "trainer.health.stop_on=[logprob_mismatch]"])


def test_ptx_needs_both_its_coefficient_and_its_data():
    assert one_problem("actor.ptx_coef=1.0").startswith("actor.ptx_coef=1.0 needs pretraining data")
    assert "leaves it unused" in one_problem("data.ptx_files=[text.parquet]")
    assert one_problem("actor.ptx_coef=-1").startswith("actor.ptx_coef=-1.0 must be ≥ 0")


def test_lora_settings():
    cfg = load_config(overrides=["actor.lora.rank=8", "actor.use_kl_loss=true"])
    assert cfg.actor.lora.rank == 8 and cfg.use_reference and not cfg.reference_model  # the actor serves as it
    assert "actor.lora.rank must be >= 0" in one_problem("actor.lora.rank=-1")
    assert "actor.lora.alpha must be > 0" in one_problem("actor.lora.rank=8", "actor.lora.alpha=0")
    assert "actor.lora.dropout must be in [0, 1)" in one_problem("actor.lora.rank=8", "actor.lora.dropout=1.0")
    msg = one_problem("actor.lora.rank=8", "actor.lora.target_modules=[q_proj]")
    assert "'q_proj' is a HF name" in msg and "write linear_qkv" in msg
    assert "unknown layer 'mlp'" in one_problem("actor.lora.rank=8", "actor.lora.target_modules=[mlp]")
    assert "is empty" in one_problem("actor.lora.rank=8", "actor.lora.target_modules=[]")
    msg = one_problem("actor.lora.rank=8", "actor.megatron.param_offload=true")
    assert "param_offload does not apply to a LoRA actor" in msg
    msg = one_problem("actor.lora.rank=8", "actor.use_kl_loss=true", "ref.megatron.param_offload=false")
    assert "is its own reference" in msg and "ref.megatron.param_offload=false" in msg
    load_config(overrides=["actor.lora.rank=0", "actor.lora.target_modules=[q_proj]"])  # off: not checked


def test_rollout_engines_on_a_pool_of_their_own():
    own_pool = ["rollout.name=transformers", "rollout.enable_resource_pool=true", "rollout.n_gpus_per_node=2",
                "algorithm.adv_estimator=grpo", "rollout.n=2"]
    assert load_config(overrides=[*own_pool, "trainer.staleness=1"]).gpus == 3  # the actor's 1 and the engines' 2
    # Its engines divide its own GPUs (the actor's TP no longer matters), and the prompts are shared among them.
    load_config(overrides=[*own_pool, "rollout.tensor_model_parallel_size=2",
                           "actor.megatron.tensor_model_parallel_size=4", "trainer.n_gpus_per_node=4"])
    assert "must divide rollout.n_gpus_per_node=2" in one_problem(*own_pool, "rollout.tensor_model_parallel_size=4")
    assert "cannot be shared among the 2 rollout engines" in one_problem(*own_pool, "data.train_batch_size=3",
                                                                         "actor.ppo_mini_batch_size=1")
    load_config(overrides=[*own_pool, "trainer.launcher=torchrun"])  # its processes serve the trainer's
    assert load_config(overrides=["rollout.name=sglang", *own_pool[1:], "trainer.staleness=1"]).gpus == 3


@pytest.mark.parametrize("override, message", [
    ("trainer.staleness=-1", "trainer.staleness=-1 must be 0 or more"),
    ("trainer.staleness=1", "needs rollout.enable_resource_pool=true"),
    ("rollout.max_logprob_mult_error=1.05", "cannot gate a run with trainer.staleness > 0"),
    ("trainer.health.stop_on=[logprob_mismatch]", "cannot name logprob_mismatch with trainer.staleness > 0"),
])
def test_staleness_needs_engines_of_their_own(override, message):
    own_pool = ["rollout.name=transformers", "rollout.enable_resource_pool=true", "trainer.staleness=1"]
    assert message in one_problem(override, *(own_pool if "staleness > 0" in message else []))


@pytest.mark.parametrize("algorithm, message", [
    (["algorithm.adv_estimator=remax"], "cannot run ReMax"),
    (["algorithm.adv_estimator=grpo", "algorithm.filter_groups.enable=true"], "dynamic sampling"),
])
def test_generating_ahead_refuses_what_is_decided_within_the_step(algorithm, message):
    own_pool = ["rollout.name=transformers", "rollout.enable_resource_pool=true", "trainer.staleness=1"]
    assert message in one_problem(*own_pool, *algorithm, "rollout.n=2")


def test_the_code_reward_and_its_sandbox_are_checked_before_the_run():
    found = problems("reward.code.mode=most", "reward.sandbox.backend=docker", "reward.sandbox.wall_s=0",
                     "reward.sandbox.workers=-1")
    assert found == ["reward.code.mode='most' is not one of: fraction, all.",
                     "reward.sandbox.backend='docker' is not one of: auto, bwrap, unshare.",
                     "reward.sandbox.workers=-1 must be > 0", "reward.sandbox.wall_s=0.0 must be > 0"]


def test_the_agent_loop_is_checked_before_the_run(tmp_path):
    found = problems("rollout.multi_turn.enable=true", "rollout.multi_turn.format=json",
                     "rollout.multi_turn.tools=[python,search,nope.py:Tool]", "rollout.multi_turn.max_assistant_turns=0",
                     "rollout.multi_turn.tool_timeout_s=-1")
    assert found == ["rollout.multi_turn.format='json' is not one of: hermes.",
                     "rollout.multi_turn.tools='search' is not one of: python.",
                     "rollout.multi_turn.tools='nope.py:Tool': file nope.py does not exist",
                     "rollout.multi_turn.max_assistant_turns=0 must be > 0",
                     "rollout.multi_turn.tool_timeout_s=-1.0 must be > 0"]
    load_config(overrides=["rollout.multi_turn.format=json"])  # checked only where the loop runs


@pytest.mark.parametrize("overrides, problem", [
    (["actor.megatron.expert_model_parallel_size=3"],
     "actor.megatron.expert_model_parallel_size=3 must divide the model's 4 experts ({where}): use one of 1, 2, 4"),
    (["actor.megatron.expert_model_parallel_size=4"],
     "actor.megatron.expert_model_parallel_size=4 × tensor × pipeline parallel = 4 must divide the role's 2 GPUs"),
    (["actor.lora.rank=8"], "actor.lora.target_modules=['linear_qkv', 'linear_proj', 'linear_fc1', 'linear_fc2']: "
                            "on a mixture-of-experts model LoRA adapts the attention layers alone; its experts "
                            "(linear_fc1, linear_fc2) take no adapters"),
    (["actor.megatron.moe_aux_loss_coeff=-1"], "actor.megatron.moe_aux_loss_coeff=-1.0 must be a finite number ≥ 0"),
    (["rollout.name=sglang", "rollout.tensor_model_parallel_size=2", "actor.megatron.tensor_model_parallel_size=2"],
     "rollout.tensor_model_parallel_size=2: an SGLang engine of several GPUs takes a mixture-of-experts model's "
     "experts whole from actor ranks of tensor and pipeline parallel 1, but the actor has 2 and 1"),
    (["rollout.name=sglang", "rollout.tensor_model_parallel_size=2", "rollout.enable_resource_pool=true",
      "rollout.nnodes=1", "rollout.n_gpus_per_node=2"],
     "rollout.tensor_model_parallel_size=2: SGLang engines of several GPUs on GPUs of their own"),
    (["algorithm.adv_estimator=gae", "critic.megatron.expert_model_parallel_size=3"],
     "critic.megatron.expert_model_parallel_size=3 must divide the model's 4 experts ({where}): use one of 1, 2, 4"),
])
def test_a_mixture_of_experts_recipe_is_checked_against_its_experts(tmp_path, overrides, problem):
    config = {"model_type": "qwen3_moe", "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
              "num_experts": 4}
    (tmp_path / "config.json").write_text(json.dumps(config))
    grpo = (f"model.path={tmp_path}", "trainer.n_gpus_per_node=2", "algorithm.adv_estimator=grpo", "rollout.n=2")
    found = problems(*grpo, *overrides)
    assert any(p.startswith(problem.format(where=f"{tmp_path}/config.json")) for p in found), found
    load_config(overrides=[*grpo, "actor.megatron.expert_model_parallel_size=2"])
    load_config(overrides=[*grpo, "actor.lora.rank=8", "actor.lora.target_modules=[linear_qkv,linear_proj]"])
    load_config(overrides=[*grpo, "rollout.name=sglang", "rollout.tensor_model_parallel_size=2",
                           "actor.megatron.expert_model_parallel_size=2"])
    load_config(overrides=[*grpo, "algorithm.adv_estimator=gae", "actor.megatron.expert_model_parallel_size=2",
                           "critic.megatron.expert_model_parallel_size=2"])  # a critic on the MoE model


def test_expert_settings_need_experts(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2", "num_attention_heads": 4,
                                                      "num_key_value_heads": 2, "num_hidden_layers": 2}))
    assert one_problem(f"model.path={tmp_path}", "trainer.n_gpus_per_node=2", "algorithm.adv_estimator=grpo",
                       "rollout.n=2", "actor.megatron.expert_model_parallel_size=2") == (
        f"actor.megatron.expert_model_parallel_size=2 splits a mixture-of-experts model's experts, but "
        f"{tmp_path}/config.json is a dense model: set it to 1")
    assert one_problem(f"model.path={tmp_path}", "algorithm.adv_estimator=grpo", "rollout.n=2",
                       "actor.megatron.moe_z_loss_coeff=0.1") == (
        f"actor.megatron.moe_z_loss_coeff=0.1 weighs a mixture-of-experts router's loss, but {tmp_path}/config.json "
        "is a dense model: set it to 0")