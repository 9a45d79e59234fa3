"""Where each key of verl's SFT trainers goes in a `megarl sft` recipe (`megarl rm` reads it too): the table the
error hints of `megarl sft`, `megarl convert` of an SFT script and docs/verl-keys.md read, as megarl.config.verl_keys
is for verl's PPO trainer. verl's `fsdp_sft_trainer` (config sft_trainer.yaml) reads one prompt and one response
column; its `sft_trainer` (sft_trainer_engine.yaml) runs an engine, whose megatron mesh keys port here too."""

from __future__ import annotations

from typing import Any

from megarl.config.verl_keys import (
    MESH,
    OMIT,
    PACKED,
    Convert,
    NotCarried,
    Port,
    VerlRun,
    dropped,
    port_by_table,
    recompute_from_checkpointing,
    to,
    warmup_steps_from_ratio,
)


def _sft_field(name: str) -> Convert:
    """verl's `data.prompt_key` (or response_key): the column; joined with its dict keys into one path when set."""
    return lambda value, run: OMIT if run.get(f"data.{name}_dict_keys") else value


def _sft_dict_keys(name: str) -> Convert:
    """verl's `data.prompt_dict_keys: [question]`, read in turn from the `data.prompt_key` column: one dotted path,
    `extra_info.question`."""
    def convert(keys: Any, run: VerlRun) -> Any:
        if not keys:
            return OMIT
        column = run.get(f"data.{name}_key", VERL_SFT_DEFAULTS[f"data.{name}_key"])
        return ".".join([column, *map(str, keys if isinstance(keys, list) else [keys])])
    return convert


def _sft_schedule(value: str, run: VerlRun) -> str:
    if value not in ("constant", "linear", "cosine"):
        raise NotCarried(f"megarl's schedules are constant, linear and cosine (optim.lr_decay_style), not {value}")
    return value


def _megatron_engine(name: str) -> Port:
    return to(f"actor.megatron.{name}", "verl's megatron engine setting")


_SFT_LORA = "megarl's SFT trains every weight; LoRA is in its RL recipes (actor.lora.*)"
_SFT_CHECKPOINT = "megarl's SFT writes the trained model once, as HF files in trainer.output_dir/hf"
VERL_SFT_KEYS: dict[str, Port] = {
    "model.partial_pretrain": to("model.path"),
    "model.enable_gradient_checkpointing": to("actor.megatron.recompute_granularity", "true is full recomputation",
                                              recompute_from_checkpointing),
    "ulysses_sequence_parallel_size": to("actor.megatron.context_parallel_size"),
    "data.prompt_key": to("data.prompt_key", "one dotted path with data.prompt_dict_keys", _sft_field("prompt")),
    "data.response_key": to("data.response_key", "one dotted path with data.response_dict_keys",
                            _sft_field("response")),
    "data.prompt_dict_keys": to("data.prompt_key", "a dotted path into the column, e.g. extra_info.question",
                                _sft_dict_keys("prompt")),
    "data.response_dict_keys": to("data.response_key", "a dotted path into the column, e.g. extra_info.answer",
                                  _sft_dict_keys("response")),
    "optim.lr_warmup_steps_ratio": to("optim.lr_warmup_steps", "a step count: ratio × total training steps",
                                      warmup_steps_from_ratio("")),
    "optim.warmup_steps_ratio": to("optim.lr_warmup_steps", "verl's earlier name of lr_warmup_steps_ratio",
                                   warmup_steps_from_ratio("")),
    "optim.lr_scheduler": to("optim.lr_decay_style", "constant, linear or cosine", _sft_schedule),
    "trainer.default_local_dir": to("trainer.output_dir", "the HF model is written to its hf/"),
    "data.seed": to("trainer.seed"),
    "data.micro_batch_size": dropped("verl's SFT trainer reads data.micro_batch_size_per_gpu alone and ignores this "
                                     "deprecated key"),
    "model.lora_rank": dropped(_SFT_LORA, same_as=0),
    "model.lora_alpha": dropped(_SFT_LORA),
    "model.target_modules": dropped(_SFT_LORA),
    "model.use_liger": dropped("Liger's kernels patch HF models; megarl's megatron layers are compiled or "
                               "Transformer Engine's", same_as=False),
    "model.strategy": dropped("an FSDP version: megarl shards with megatron (actor.megatron.*)"),
    "model.external_lib": dropped("megarl builds the model through mbridge from the HF checkpoint", same_as=None),
    "use_remove_padding": dropped(PACKED, same_as=True),
    "model.use_remove_padding": dropped(PACKED, same_as=True),
    "data.use_shm": dropped("megarl reads the parquet files where they are", same_as=False),
    "model.use_shm": dropped("megarl reads the checkpoint where it is", same_as=False),
    "data.multiturn.enable": dropped("megarl's SFT reads one prompt and one response per row (a chat list through "
                                     "the chat template as the prompt)", same_as=False),
    "data.chat_template": dropped("megarl applies the tokenizer's own chat template", same_as=None),
    "data.balance_dp_token": dropped("megarl balances micro-batches by tokens with data.use_dynamic_bsz",
                                     same_as=False),
    "data.train_max_samples": dropped("megarl trains on every row of data.train_files", same_as=-1),
    "data.val_max_samples": dropped("megarl evaluates every row of data.val_files", same_as=-1),
    "data.pad_mode": dropped(PACKED, same_as="no_padding"),
    "trainer.save_freq": dropped(_SFT_CHECKPOINT, same_as=-1),
    "trainer.max_ckpt_to_keep": dropped(_SFT_CHECKPOINT, same_as=None),
    "trainer.resume_mode": dropped(_SFT_CHECKPOINT + ", and starts from model.path"),
    "trainer.resume_from_path": dropped(_SFT_CHECKPOINT + ", and starts from model.path", same_as=None),
    "trainer.default_hdfs_dir": dropped("megarl writes to trainer.output_dir only", same_as=None),
    "trainer.device": dropped("megarl runs on CUDA GPUs, or on CPU where there are none", same_as="cuda"),
    "engine": dropped("the engine verl's sft_trainer runs (a config group): megarl's is megatron-core always",
                      same_as="megatron"),
    "engine.strategy": dropped("megarl's engine is megatron-core always", same_as="megatron"),
    "engine.use_mbridge": dropped("megarl builds the megatron model through mbridge always", same_as=True),
    "optim": dropped("verl's optimizer config group: megarl's is megatron's distributed Adam (optim.*)"),
    **{f"engine.{name}": _megatron_engine(name) for name in (*MESH, "expert_model_parallel_size", "param_offload",
                                                              "grad_offload", "optimizer_offload")},
}
VERL_SFT_DROPPED_PREFIXES = {
    "model.fsdp_config.": "an FSDP sharding setting: megarl shards with megatron (actor.megatron.*)",
    "engine.": "a setting of verl's training engine: megarl's is megatron-core (actor.megatron.*)",
    "checkpoint.": _SFT_CHECKPOINT,
    "trainer.checkpoint.": _SFT_CHECKPOINT,
    "data.custom_cls.": "megarl's SFT dataset reads prompt and response columns (data.prompt_key, "
                        "data.response_key)",
    "data.apply_chat_template_kwargs.": "megarl applies the tokenizer's chat template as it is",
    "data.multiturn.": "megarl's SFT reads one prompt and one response per row",
}
# verl's SFT trainer defaults (sft_trainer.yaml) where megarl's differ, by megarl key. Not among them:
# optim.lr_warmup_steps (verl's ratio is a step count only once the run's length is known) and the run's size
# (torchrun's, not trainer.n_gpus_per_node); a converted recipe says so.
VERL_SFT_WARMUP_RATIO = 0.1
VERL_SFT_DEFAULTS: dict[str, Any] = {
    "data.train_batch_size": 256,
    "data.prompt_key": "question",
    "data.response_key": "answer",
    "optim.betas": [0.9, 0.95],
    "actor.megatron.recompute_granularity": "full",
    "trainer.total_epochs": 4,
    "trainer.logger": ["console", "wandb"],
    "trainer.project_name": "gsm8k-sft",
    "trainer.experiment_name": "test",
}


def port_verl_sft_key(key: str) -> Port | None:
    """Where a key of verl's SFT trainer goes in a `megarl sft` recipe, as `port_verl_key`."""
    return port_by_table(key, VERL_SFT_KEYS, {}, VERL_SFT_DROPPED_PREFIXES)
