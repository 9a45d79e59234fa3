"""verl's recipe keys and their megarl names, so an error can say exactly how to port a verl command line.

Most verl keys port by dropping the `actor_rollout_ref.` level; the renames below are the exceptions. verl's
SFT trainer has keys of its own (`megarl sft` recipes), mostly spelled the same in megarl; its renames are a
table of their own. docs/verl-keys.md is the readable version of these tables.
"""

from __future__ import annotations

VERL_PREFIXES = {
    "actor_rollout_ref.model.": "model.",
    "actor_rollout_ref.actor.": "actor.",
    "actor_rollout_ref.rollout.": "rollout.",
    "actor_rollout_ref.ref.": "ref.",
    "reward_model.megatron.": "reward.model.megatron.",
}

VERL_RENAMES = {
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "actor.log_prob_micro_batch_size_per_gpu",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": "actor.log_prob_max_token_len_per_gpu",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": "actor.use_dynamic_bsz",
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": "actor.use_dynamic_bsz",
    "actor_rollout_ref.actor.policy_loss.loss_mode": "actor.policy_loss",
    "actor_rollout_ref.actor.grad_clip": "actor.optim.clip_grad",
    "actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity": (
        "actor.megatron.recompute_granularity"
    ),
    "actor_rollout_ref.model.enable_gradient_checkpointing": "actor.megatron.recompute_granularity",
    "actor_rollout_ref.actor.megatron.override_ddp_config.grad_reduce_in_fp32": "actor.megatron.grad_reduce_in_fp32",
    "critic.megatron.override_ddp_config.grad_reduce_in_fp32": "critic.megatron.grad_reduce_in_fp32",
    "critic.grad_clip": "critic.optim.clip_grad",
    "custom_reward_function.path": "reward.function",
    "custom_reward_function.name": "reward.function",
    "custom_reward_function.reward_kwargs": "reward.kwargs",
    "reward_model.reward_kwargs": "reward.kwargs",
    "reward_model.overlong_buffer.enable": "reward.overlong_buffer.enable",
    "reward_model.overlong_buffer.len": "reward.overlong_buffer.len",
    "reward_model.overlong_buffer.penalty_factor": "reward.overlong_buffer.penalty_factor",
    "reward_model.enable": "reward.model.path",
    "reward_model.model.path": "reward.model.path",
    "reward_model.micro_batch_size_per_gpu": "reward.model.micro_batch_size_per_gpu",
    "reward_model.use_dynamic_bsz": "reward.model.use_dynamic_bsz",
    "reward_model.forward_max_token_len_per_gpu": "reward.model.max_token_len_per_gpu",
    "reward_model.enable_resource_pool": "reward.model.enable_resource_pool",
    "reward_model.nnodes": "reward.model.nnodes",
    "reward_model.n_gpus_per_node": "reward.model.n_gpus_per_node",
    "reward_model.model.input_tokenizer": "reward.model.chat_template",
    "trainer.default_local_dir": "trainer.output_dir",
    "data.seed": "trainer.seed",
    "global_profiler.steps": "trainer.profile_steps",
    "actor_rollout_ref.model.lora_rank": "actor.lora.rank",
    "actor_rollout_ref.model.lora_alpha": "actor.lora.alpha",
    "actor_rollout_ref.model.target_modules": "actor.lora.target_modules",
    "actor_rollout_ref.model.lora.rank": "actor.lora.rank",
    "actor_rollout_ref.model.lora.alpha": "actor.lora.alpha",
    "actor_rollout_ref.model.lora.dropout": "actor.lora.dropout",
    "actor_rollout_ref.model.lora.target_modules": "actor.lora.target_modules",
    "actor_rollout_ref.nccl_timeout": "trainer.collective_timeout_s",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": "actor.optim.lr_warmup_steps",
    "critic.optim.lr_warmup_steps_ratio": "critic.optim.lr_warmup_steps",
}

# What the renamed value means, where it is not the same value under a new name.
VERL_NOTES = {
    "custom_reward_function.path": "write path/to/file.py:function_name",
    "reward_model.enable": "the reward model's HF checkpoint directory turns it on (no path: off)",
    "reward_model.model.input_tokenizer": ("not needed: a reward model with another tokenizer or chat template "
                                           "has its inputs re-encoded by itself; to override its chat template, "
                                           "set this key to a Jinja template"),
    "custom_reward_function.name": "write path/to/file.py:function_name",
    "actor_rollout_ref.model.enable_gradient_checkpointing": "set it to full",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": "a step count: ratio × total training steps",
    "critic.optim.lr_warmup_steps_ratio": "a step count: ratio × total training steps",
    "actor_rollout_ref.model.target_modules": "megatron's layers: linear_qkv, linear_proj, linear_fc1, linear_fc2",
}


VERL_SFT_RENAMES = {
    "model.partial_pretrain": "model.path",
    "model.enable_gradient_checkpointing": "actor.megatron.recompute_granularity",
    "ulysses_sequence_parallel_size": "actor.megatron.context_parallel_size",
    "data.micro_batch_size": "data.micro_batch_size_per_gpu",
    "data.prompt_dict_keys": "data.prompt_key",
    "data.response_dict_keys": "data.response_key",
    "optim.warmup_steps_ratio": "optim.lr_warmup_steps",
    "optim.lr_scheduler": "optim.lr_decay_style",
    "trainer.default_local_dir": "trainer.output_dir",
    "data.seed": "trainer.seed",
}

VERL_SFT_NOTES = {
    "model.enable_gradient_checkpointing": "set it to full",
    "data.micro_batch_size": "samples per data-parallel rank",
    "data.prompt_dict_keys": "a dotted path into the column, e.g. extra_info.question",
    "data.response_dict_keys": "a dotted path into the column, e.g. extra_info.answer",
    "optim.warmup_steps_ratio": "a step count: ratio × total training steps",
}


def _translate(key: str, renames: dict[str, str], notes: dict[str, str], prefixes: dict[str, str]) -> str | None:
    if key in renames:
        note = notes.get(key)
        return renames[key] + (f" ({note})" if note else "")
    for verl_prefix, ours in prefixes.items():
        if key.startswith(verl_prefix):
            return ours + key[len(verl_prefix) :]
    return None


def translate_verl_key(key: str) -> str | None:
    """The megarl key for verl's `key` (with a note on the value where it changes), or None."""
    return _translate(key, VERL_RENAMES, VERL_NOTES, VERL_PREFIXES)


def translate_verl_sft_key(key: str) -> str | None:
    """The `megarl sft` key for a key of verl's SFT trainer, as `translate_verl_key`."""
    return _translate(key, VERL_SFT_RENAMES, VERL_SFT_NOTES, {})
