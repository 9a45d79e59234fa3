import re

import pytest
from omegaconf import OmegaConf

from megarl.config import RM_RECIPE, RL_RECIPE, SFT_RECIPE, ConfigError, load_config
from megarl.config.verl_keys import (
    VERL_DEFAULTS,
    VERL_FSDP_DEFAULTS,
    VERL_KEYS,
    VERL_MEGATRON_DEFAULTS,
    VERL_PREFIXES,
    port_verl_key,
)
from megarl.config.verl_sft_keys import VERL_SFT_DEFAULTS, VERL_SFT_KEYS

# Keys verl users set (verl's examples/ and its ppo_trainer / ppo_megatron_trainer configs), beside VERL_KEYS.
COMMON_VERL_KEYS = """
actor_rollout_ref.model.path actor_rollout_ref.model.use_shm actor_rollout_ref.model.trust_remote_code
actor_rollout_ref.model.use_fused_kernels actor_rollout_ref.model.external_lib
actor_rollout_ref.actor.optim.lr actor_rollout_ref.actor.optim.weight_decay actor_rollout_ref.actor.optim.clip_grad
actor_rollout_ref.actor.optim.lr_scheduler_type actor_rollout_ref.actor.optim.min_lr_ratio
actor_rollout_ref.actor.ppo_mini_batch_size actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
actor_rollout_ref.actor.use_dynamic_bsz actor_rollout_ref.actor.ppo_max_token_len_per_gpu
actor_rollout_ref.actor.use_kl_loss actor_rollout_ref.actor.kl_loss_coef actor_rollout_ref.actor.kl_loss_type
actor_rollout_ref.actor.entropy_coeff actor_rollout_ref.actor.clip_ratio_low actor_rollout_ref.actor.clip_ratio_high
actor_rollout_ref.actor.clip_ratio_c actor_rollout_ref.actor.loss_agg_mode actor_rollout_ref.actor.ppo_epochs
actor_rollout_ref.actor.use_torch_compile actor_rollout_ref.actor.entropy_checkpointing
actor_rollout_ref.actor.shuffle actor_rollout_ref.actor.router_replay.mode
actor_rollout_ref.actor.fsdp_config.fsdp_size actor_rollout_ref.actor.fsdp_config.offload_policy
actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params actor_rollout_ref.actor.fsdp_config.model_dtype
actor_rollout_ref.actor.megatron.tensor_model_parallel_size actor_rollout_ref.actor.megatron.context_parallel_size
actor_rollout_ref.actor.megatron.pipeline_model_parallel_size actor_rollout_ref.actor.megatron.param_offload
actor_rollout_ref.actor.megatron.grad_offload actor_rollout_ref.actor.megatron.optimizer_offload
actor_rollout_ref.actor.megatron.expert_model_parallel_size actor_rollout_ref.actor.megatron.sequence_parallel
actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size actor_rollout_ref.actor.megatron.seed
actor_rollout_ref.actor.megatron.override_transformer_config.apply_rope_fusion
actor_rollout_ref.actor.megatron.override_transformer_config.gradient_accumulation_fusion
actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_offload_fraction
actor_rollout_ref.actor.checkpoint.save_contents actor_rollout_ref.actor.profiler.enable
actor_rollout_ref.rollout.n actor_rollout_ref.rollout.mode actor_rollout_ref.rollout.temperature
actor_rollout_ref.rollout.top_p actor_rollout_ref.rollout.top_k actor_rollout_ref.rollout.do_sample
actor_rollout_ref.rollout.tensor_model_parallel_size actor_rollout_ref.rollout.gpu_memory_utilization
actor_rollout_ref.rollout.enforce_eager actor_rollout_ref.rollout.free_cache_engine
actor_rollout_ref.rollout.enable_chunked_prefill actor_rollout_ref.rollout.max_num_batched_tokens
actor_rollout_ref.rollout.max_num_seqs actor_rollout_ref.rollout.max_model_len actor_rollout_ref.rollout.dtype
actor_rollout_ref.rollout.calculate_log_probs actor_rollout_ref.rollout.layered_summon
actor_rollout_ref.rollout.val_kwargs.n actor_rollout_ref.rollout.val_kwargs.do_sample
actor_rollout_ref.rollout.val_kwargs.temperature actor_rollout_ref.rollout.multi_turn.format
actor_rollout_ref.rollout.multi_turn.tool_config_path actor_rollout_ref.rollout.agent.num_workers
actor_rollout_ref.rollout.engine_kwargs.vllm.disable_mm_preprocessor_cache
actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend actor_rollout_ref.rollout.prompt_length
actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu actor_rollout_ref.ref.log_prob_max_token_len_per_gpu
actor_rollout_ref.ref.megatron.tensor_model_parallel_size actor_rollout_ref.ref.megatron.pipeline_model_parallel_size
actor_rollout_ref.ref.megatron.context_parallel_size actor_rollout_ref.ref.fsdp_config.wrap_policy.min_num_params
actor_rollout_ref.ref.use_torch_compile
critic.model.path critic.model.tokenizer_path critic.model.fsdp_config.fsdp_size critic.model.lora_rank
critic.optim.lr critic.ppo_micro_batch_size_per_gpu critic.ppo_max_token_len_per_gpu critic.use_dynamic_bsz
critic.megatron.tensor_model_parallel_size critic.cliprange_value critic.checkpoint.save_contents critic.enable
data.train_files data.return_raw_chat data.image_key data.reward_fn_key data.dataloader_num_workers
data.train_max_samples data.trust_remote_code data.custom_cls.path
trainer.balance_batch trainer.log_val_generations trainer.default_hdfs_dir trainer.device trainer.val_only
trainer.del_local_ckpt_after_load trainer.esi_redundant_time
algorithm.use_pf_ppo algorithm.rollout_correction.bypass_mode
reward_model.reward_manager reward_model.use_reward_loop reward_model.num_workers reward_model.rollout.name
reward_model.reward_kwargs.max_resp_len reward_model.model.fsdp_config.param_offload reward_model.sandbox_fusion.url
global_profiler.tool hydra.run.dir ray_kwargs.ray_init.num_cpus transfer_queue.enable
""".split()


def _hint(key: str, schema=RL_RECIPE) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(overrides=[f"{key}=1"], schema=schema)
    return str(info.value)


@pytest.mark.parametrize("schema, keys", [(RL_RECIPE, [*VERL_KEYS, *COMMON_VERL_KEYS]), (SFT_RECIPE, VERL_SFT_KEYS),
                                          (RM_RECIPE, VERL_SFT_KEYS)], ids=["rl", "sft", "rm"])
def test_every_verl_key_hint_names_a_key_megarl_has(schema, keys):
    """A verl key is refused with one line: the megarl key it is (one megarl has), or why there is none."""
    for key in keys:
        if schema.accepts(key) or schema.keys.get(key) == "section":  # spelt alike; or a section (verl: a group)
            continue
        hint = _hint(key, schema)
        named = re.findall(r"in megarl it is ([\w.]*\w)", hint)
        for close in re.findall(r"Did you mean (.*)\?", hint):
            named += close.split(" or ")
        assert all(schema.accepts(k) for k in named), (key, hint)
        missing = re.search(r"megarl has no ([\w.]*\w)", hint)
        assert not missing or missing.group(1) == "counterpart" or not schema.accepts(missing.group(1)), (key, hint)
        if schema.port_verl_key(key) is not None:  # a verl key: its megarl key, or why there is none
            assert named or missing, (key, hint)


def test_tables_point_at_keys_and_sections_megarl_has():
    for verl_key, port in VERL_KEYS.items():
        assert port.key is None or RL_RECIPE.accepts(port.key), verl_key
        assert port.key is not None or port.note, verl_key  # a key that does not carry over says why
    for ours in VERL_PREFIXES.values():
        assert RL_RECIPE.keys.get(ours.rstrip(".")) in ("section", "open"), ours
    for verl_key, port in VERL_SFT_KEYS.items():
        assert port.key is None or SFT_RECIPE.accepts(port.key), verl_key
        assert port.key is not None or port.note, verl_key
    assert port_verl_key("data.train_batch_size") is None
    assert port_verl_key("actor_rollout_ref.rollout.val_kwargs.temperature").key == "rollout.val_kwargs.temperature"
    assert port_verl_key("actor_rollout_ref.rollout.engine_kwargs.sglang.x").key == "rollout.engine_kwargs.x"


@pytest.mark.parametrize("schema, table", [(RL_RECIPE, VERL_DEFAULTS), (RL_RECIPE, VERL_FSDP_DEFAULTS),
                                           (RL_RECIPE, VERL_MEGATRON_DEFAULTS), (SFT_RECIPE, VERL_SFT_DEFAULTS)],
                         ids=["rl", "fsdp", "megatron", "sft"])
def test_verl_defaults_are_keys_whose_megarl_default_differs(schema, table):
    for key, verl_default in table.items():
        assert schema.accepts(key), key
        ours = OmegaConf.select(schema.defaults, key)
        ours = OmegaConf.to_container(ours) if OmegaConf.is_config(ours) else ours
        assert ours != verl_default, key
