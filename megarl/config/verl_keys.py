"""Where each verl recipe key goes in a megarl recipe: the one table that the error hints of `megarl train`
(`sft`, `rm`), `megarl convert` and docs/verl-keys.md (its tables are generated from here) all read.

Most verl keys port by dropping the `actor_rollout_ref.` level (VERL_PREFIXES). VERL_KEYS holds the exceptions:
renamed keys, values whose meaning changes (a global micro-batch becomes a per-GPU one), FSDP settings and their
megatron counterparts, and keys megarl has no counterpart for, with the reason. VERL_DEFAULTS are verl's defaults
where megarl's differ, so that a converted recipe means what the verl run meant. verl's SFT trainer has tables of
its own (`megarl sft` recipes: megarl/config/verl_sft_keys.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Any, Callable, Mapping

from megarl.config.lora_checks import HF_TARGETS
from megarl.config.schema import LORA_TARGETS
from parallel.profiler import PROFILE_TOOLS


class NotCarried(Exception):
    """A verl value megarl has no counterpart for; the message says why."""


OMIT = object()  # a converted value that needs no line: megarl already behaves so
_ANY = object()


@dataclass(frozen=True)
class VerlRun:
    """What one verl launch sets: its overrides (verl key → value) and whether it runs verl's megatron config
    (`--config-name=ppo_megatron_trainer`) rather than the FSDP one."""

    overrides: Mapping[str, Any] = field(default_factory=dict)
    megatron: bool = False

    def get(self, key: str, default: Any = None) -> Any:
        value = self.overrides.get(key)
        return default if value is None else value

    def data_parallel_size(self, role: str) -> int:
        """verl's data-parallel size of `role` (`actor_rollout_ref.actor` or `critic`), by verl's defaults."""
        world = self.get("trainer.nnodes", 1) * self.get("trainer.n_gpus_per_node", 8)
        if self.megatron:
            split = prod(self.get(f"{role}.megatron.{n}", 1) for n in MESH)
        else:
            split = self.get(f"{role}.ulysses_sequence_parallel_size",
                             self.get(f"{role}.fsdp_config.ulysses_sequence_parallel_size", 1))
        return max(world // max(split, 1), 1)

    @property
    def lora(self) -> bool:
        return bool(self.get("actor_rollout_ref.model.lora_rank", self.get("actor_rollout_ref.model.lora.rank", 0)))


Convert = Callable[[Any, VerlRun], Any]


@dataclass(frozen=True)
class Port:
    """Where one verl key goes: `key` in megarl (None: nowhere); `note`: how its value's meaning changes, or why it
    does not carry over; `convert`: verl's value → megarl's (OMIT: no line; NotCarried: nothing equivalent);
    `same_as`: for a key with no counterpart, the value megarl always behaves as (that value is no loss)."""

    key: str | None
    note: str = ""
    convert: Convert | None = None
    same_as: Any = _ANY

    def value(self, verl_value: Any, run: VerlRun) -> Any:
        if self.key is None:
            if self.same_as is not _ANY and verl_value == self.same_as:
                return OMIT
            raise NotCarried(self.note)
        return verl_value if self.convert is None else self.convert(verl_value, run)


def to(key: str, note: str = "", convert: Convert | None = None) -> Port:
    return Port(key, note, convert)


def dropped(why: str, same_as: Any = _ANY) -> Port:
    return Port(None, why, same_as=same_as)


MESH = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size")


def _per_gpu(role: str) -> Convert:
    """verl's deprecated global micro-batch (samples over all data-parallel ranks) → samples per rank."""
    return lambda value, run: OMIT if value is None else max(value // run.data_parallel_size(role), 1)


def recompute_from_checkpointing(value: bool, run: VerlRun) -> str | None:
    if run.megatron:
        raise NotCarried("verl's megatron workers ignore it; megatron recomputes by "
                         "megatron.override_transformer_config.recompute_granularity")
    return "full" if value else None


def _sglang(value: str, run: VerlRun) -> str:
    return value if value in ("sglang", "transformers") else "sglang"


def _reward_function(path: str | None, run: VerlRun) -> Any:
    return OMIT if path is None else f"{path}:{run.get('custom_reward_function.name', 'compute_score')}"


def _reward_function_name(name: str, run: VerlRun) -> Any:
    if run.get("custom_reward_function.path") is None:
        raise NotCarried("verl reads it only with custom_reward_function.path")
    return OMIT  # joined into reward.function with the path


def warmup_steps_from_ratio(role: str) -> Convert:
    """verl's `{role}.optim.lr_warmup_steps_ratio` (role "": the SFT trainer's `optim.`) as a step count."""
    steps_key = f"{role}.optim.lr_warmup_steps".lstrip(".")

    def convert(ratio: float, run: VerlRun) -> Any:
        if not ratio or run.get(steps_key, -1) >= 0:
            return OMIT  # none, or verl's lr_warmup_steps wins over the ratio
        steps = run.get("trainer.total_training_steps")
        if steps is None:
            raise NotCarried("megarl counts warmup in steps (optim.lr_warmup_steps): ratio × the run's total steps, "
                             "which the data's size decides; set the step count")
        return round(ratio * steps)
    return convert


def _steps_unless_negative(value: int, run: VerlRun) -> Any:
    return OMIT if value is None or value < 0 else value  # verl's -1: take lr_warmup_steps_ratio


def _omit(value: Any, run: VerlRun) -> Any:
    return OMIT


def _profile_tool(value: str, run: VerlRun) -> str:
    if value not in PROFILE_TOOLS:
        raise NotCarried(f"megarl records with {' or '.join(PROFILE_TOOLS)}, not {value}")
    return value


def _lora_targets(value: str | list[str], run: VerlRun) -> list[str]:
    """verl's HF projection names (or all-linear) → the megatron layers that hold them."""
    names = [value] if isinstance(value, str) else list(value)
    layers = [layer for name in names
              for layer in (LORA_TARGETS if name == "all-linear" else [HF_TARGETS.get(name, name)])]
    return list(dict.fromkeys(layers))


def _actor_offload(value: bool, run: VerlRun) -> Any:
    if value and run.lora:
        raise NotCarried("megarl does not offload a LoRA actor's frozen base weights (they are not in megatron's "
                         "parameter buffers)")
    return value


def _ref_offload(value: bool, run: VerlRun) -> Any:
    if run.lora:  # a LoRA actor is its own reference: its weights without the adapters
        return OMIT
    return value


def _as_actor(name: str) -> Convert:
    """The reference's mesh size `name`: megarl's is the actor's; another one cannot carry over."""
    def convert(value: int, run: VerlRun) -> Any:
        if value == run.get(f"actor_rollout_ref.actor.megatron.{name}", 1):
            return OMIT
        raise NotCarried(f"{_REF_MESH}; verl's reference had its own")
    return convert


def _rollout_routing(value: bool, run: VerlRun) -> Any:
    """verl's engine switch for R3: megarl's engine records its routing exactly when the actor replays it."""
    mode = run.get("actor_rollout_ref.actor.router_replay.mode",
                   run.get("actor_rollout_ref.actor.megatron.router_replay.mode", "disabled"))
    if bool(value) == (mode == "R3"):
        return OMIT
    raise NotCarried(f"megarl's engine records its routing only for the actor's R3 replay; verl's run had "
                     f"router_replay.mode={mode}")


def _experts_tp(value: int | None, run: VerlRun) -> Any:
    """megarl's experts are tensor-parallel as the layers are (megatron's default); another size cannot carry over."""
    if value in (None, run.get("actor_rollout_ref.actor.megatron.tensor_model_parallel_size", 1)):
        return OMIT
    raise NotCarried(f"{_EXPERTS_TP}; verl's run split them over {value}")


VERL_PREFIXES = {
    "actor_rollout_ref.model.": "model.",
    "actor_rollout_ref.actor.": "actor.",
    "actor_rollout_ref.rollout.": "rollout.",
    "actor_rollout_ref.ref.": "ref.",
    "actor_rollout_ref.rollout.engine_kwargs.sglang.": "rollout.engine_kwargs.",
    "reward_model.megatron.": "reward.model.megatron.",
}

_ONLY_MEGATRON = "megarl trains with megatron-core: FSDP offloads and Ulysses map to their megatron counterparts"
PACKED = "megarl always packs sequences, without padding"
_OVERLONG_LOG = ("megarl logs DAPO's overlong penalty whenever reward.overlong_buffer is on "
                 "(reward/overlong_penalty/mean, reward/overlong_ratio)")
_MBRIDGE = "megarl always builds the megatron model from the HF checkpoint through mbridge"
_JOINED = "path/to/file.py:function_name: verl's path and name joined"
_REF_MESH = "the reference runs in the actor's processes, in the actor's megatron layout"
_EXPERTS_TP = "megarl's experts are split over the layers' tensor-parallel ranks (megatron's default)"
_VLLM = "a vLLM engine setting: SGLang's own go in rollout.engine_kwargs (passed to the engine as they are)"

VERL_KEYS: dict[str, Port] = {
    # Renamed: megarl names the thing once, where it acts.
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": to(
        "actor.log_prob_micro_batch_size_per_gpu", "the actor computes the old log-probs"),
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": to("actor.log_prob_max_token_len_per_gpu"),
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz": to("actor.use_dynamic_bsz",
                                                             "one switch for the actor's passes"),
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz": to("actor.use_dynamic_bsz", "one switch for the actor's passes"),
    "actor_rollout_ref.actor.policy_loss.loss_mode": to("actor.policy_loss"),
    "actor_rollout_ref.actor.grad_clip": to("actor.optim.clip_grad"),
    "critic.grad_clip": to("critic.optim.clip_grad"),
    "actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity": to(
        "actor.megatron.recompute_granularity", "full or selective"),
    **{f"actor_rollout_ref.actor.megatron.override_transformer_config.{name}": to(
        f"actor.megatron.{name}", "a mixture-of-experts router's loss weight") for name in ("moe_aux_loss_coeff",
                                                                                          "moe_z_loss_coeff")},
    "actor_rollout_ref.actor.megatron.override_ddp_config.grad_reduce_in_fp32": to(
        "actor.megatron.grad_reduce_in_fp32", "the gradient buffers' dtype: true float32, false the weights' bf16"),
    "critic.megatron.override_ddp_config.grad_reduce_in_fp32": to("critic.megatron.grad_reduce_in_fp32"),
    "actor_rollout_ref.model.enable_gradient_checkpointing": to(
        "actor.megatron.recompute_granularity", "true is full recomputation", recompute_from_checkpointing),
    "critic.model.enable_gradient_checkpointing": to(
        "critic.megatron.recompute_granularity", "true is full recomputation", recompute_from_checkpointing),
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": to(
        "actor.optim.lr_warmup_steps", "a step count: ratio × total training steps", warmup_steps_from_ratio(
            "actor_rollout_ref.actor")),
    "critic.optim.lr_warmup_steps_ratio": to("critic.optim.lr_warmup_steps", "a step count: ratio × total training "
                                             "steps", warmup_steps_from_ratio("critic")),
    "actor_rollout_ref.actor.optim.lr_warmup_steps": to("actor.optim.lr_warmup_steps", "",
                                                        _steps_unless_negative),
    "critic.optim.lr_warmup_steps": to("critic.optim.lr_warmup_steps", "", _steps_unless_negative),
    "custom_reward_function.path": to("reward.function", _JOINED, _reward_function),
    "custom_reward_function.name": to("reward.function", _JOINED, _reward_function_name),
    "custom_reward_function.reward_kwargs": to("reward.kwargs"),
    "reward_model.reward_kwargs": to("reward.kwargs"),
    "reward_model.sandbox_fusion.max_concurrent": to("reward.sandbox.workers", "programs run at once in megarl's "
                                                     "local sandbox (bubblewrap), not requests to a service"),
    "reward_model.sandbox_fusion.memory_limit_mb": to("reward.sandbox.memory_mb"),
    "reward_model.sandbox_fusion.url": dropped("megarl runs code-reward tests in a local sandbox (bubblewrap, "
                                               "reward.sandbox.*), no service", same_as=None),
    "actor_rollout_ref.rollout.multi_turn.tool_config_path": dropped(
        "name the tools in rollout.multi_turn.tools: registered names (python) or path/to/file.py:Class, a "
        "megarl.agent.Tool subclass (docs/agents.md)", same_as=None),
    "actor_rollout_ref.rollout.multi_turn.max_parallel_calls": dropped(
        "a megarl turn ends at its first complete call", same_as=1),
    "actor_rollout_ref.rollout.multi_turn.max_user_turns": dropped(
        "megarl's loop has no simulated user; a tool message follows each call", same_as=None),
    "actor_rollout_ref.rollout.multi_turn.interaction_config_path": dropped(
        "megarl's loop has no simulated user", same_as=None),
    "actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side": dropped(
        "megarl keeps the start of a long tool output and says how much was cut", same_as="right"),
    "actor_rollout_ref.rollout.multi_turn.use_inference_chat_template": dropped(
        "megarl renders tool messages with the model's chat template and never re-encodes the model's tokens",
        same_as=None),
    "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode": dropped(
        "megarl never re-encodes the model's tokens, so there is nothing to check", same_as=None),
    "reward_model.overlong_buffer.enable": to("reward.overlong_buffer.enable"),
    "reward_model.overlong_buffer.len": to("reward.overlong_buffer.len"),
    "reward_model.overlong_buffer.penalty_factor": to("reward.overlong_buffer.penalty_factor"),
    "reward_model.reward_kwargs.overlong_buffer_cfg.enable": to("reward.overlong_buffer.enable"),
    "reward_model.reward_kwargs.overlong_buffer_cfg.len": to("reward.overlong_buffer.len"),
    "reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor": to("reward.overlong_buffer.penalty_factor"),
    "reward_model.reward_kwargs.overlong_buffer_cfg.log": dropped(_OVERLONG_LOG, same_as=True),
    "reward_model.overlong_buffer.log": dropped(_OVERLONG_LOG, same_as=True),
    "reward_model.num_workers": to("reward.workers", "processes that run reward.function"),
    "reward_model.use_reward_loop": dropped("verl's asynchronous reward loop: megarl scores each response as it "
                                            "finishes, beside generation, where rollout.mode=async"),
    "data.trust_remote_code": to("model.trust_remote_code", "one switch for the tokenizer and the model"),
    "actor_rollout_ref.rollout.expert_parallel_size": dropped(
        "megarl's engine splits a mixture-of-experts model's experts over its tensor-parallel GPUs (SGLang's ep_size "
        "is rollout.tensor_model_parallel_size)"),
    "actor_rollout_ref.rollout.data_parallel_size": dropped(
        "SGLang's data-parallel attention inside one engine: megarl runs one engine per "
        "rollout.tensor_model_parallel_size GPUs", same_as=1),
    **{f"{role}.megatron.virtual_pipeline_model_parallel_size": dropped(
        "megarl's pipeline has no virtual stages (megatron.pipeline_model_parallel_size)", same_as=None)
       for role in ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic")},
    "reward_model.enable": to("reward.model.path", "the reward model's HF checkpoint directory turns it on (no path: "
                              "off)", _omit),
    "reward_model.model.path": to("reward.model.path"),
    "reward_model.micro_batch_size_per_gpu": to("reward.model.micro_batch_size_per_gpu"),
    "reward_model.use_dynamic_bsz": to("reward.model.use_dynamic_bsz"),
    "reward_model.forward_max_token_len_per_gpu": to("reward.model.max_token_len_per_gpu"),
    "reward_model.enable_resource_pool": to("reward.model.enable_resource_pool"),
    "reward_model.nnodes": to("reward.model.nnodes"),
    "reward_model.n_gpus_per_node": to("reward.model.n_gpus_per_node"),
    "reward_model.model.input_tokenizer": to(
        "reward.model.chat_template", "not needed: a reward model with another tokenizer or chat template has its "
        "inputs re-encoded by itself; to override its chat template, set this key to a Jinja template", _omit),
    "trainer.default_local_dir": to("trainer.output_dir", "checkpoints, metrics and config.yaml live here"),
    "trainer.max_actor_ckpt_to_keep": to("trainer.max_ckpt_to_keep", "one count for every role's checkpoints"),
    "trainer.max_critic_ckpt_to_keep": to("trainer.max_ckpt_to_keep", "one count for every role's checkpoints"),
    "data.seed": to("trainer.seed", "one seed for the run"),
    "data.tokenizer": to("model.tokenizer_path"),
    "global_profiler.steps": to("trainer.profile_steps", "a Chrome trace per worker process and a phase timeline"),
    "global_profiler.tool": to("trainer.profile_tool", "torch or torch_memory; nsys and npu have no counterpart",
                               _profile_tool),
    "actor_rollout_ref.model.lora_rank": to("actor.lora.rank"),
    "actor_rollout_ref.model.lora_alpha": to("actor.lora.alpha"),
    "actor_rollout_ref.model.target_modules": to(
        "actor.lora.target_modules", "megatron's layers: linear_qkv, linear_proj, linear_fc1, linear_fc2",
        _lora_targets),
    "actor_rollout_ref.model.lora.rank": to("actor.lora.rank"),
    "actor_rollout_ref.model.lora.alpha": to("actor.lora.alpha"),
    "actor_rollout_ref.model.lora.dropout": to("actor.lora.dropout"),
    "actor_rollout_ref.model.lora.target_modules": to("actor.lora.target_modules", "", _lora_targets),
    "actor_rollout_ref.nccl_timeout": to("trainer.collective_timeout_s", "for every collective, NCCL or gloo"),
    # verl's deprecated global micro-batches: samples over all data-parallel ranks.
    "actor_rollout_ref.actor.ppo_micro_batch_size": to(
        "actor.ppo_micro_batch_size_per_gpu", "per data-parallel rank: verl's global count ÷ its data-parallel size",
        _per_gpu("actor_rollout_ref.actor")),
    "actor_rollout_ref.rollout.log_prob_micro_batch_size": to(
        "actor.log_prob_micro_batch_size_per_gpu", "per data-parallel rank: verl's global count ÷ its data-parallel "
        "size", _per_gpu("actor_rollout_ref.actor")),
    "actor_rollout_ref.ref.log_prob_micro_batch_size": to(
        "ref.log_prob_micro_batch_size_per_gpu", "per data-parallel rank: verl's global count ÷ its data-parallel "
        "size", _per_gpu("actor_rollout_ref.actor")),
    "critic.ppo_micro_batch_size": to("critic.ppo_micro_batch_size_per_gpu", "per data-parallel rank: verl's global "
                                      "count ÷ its data-parallel size", _per_gpu("critic")),
    "critic.forward_micro_batch_size": to("critic.forward_micro_batch_size_per_gpu", "per data-parallel rank: "
                                          "verl's global count ÷ its data-parallel size", _per_gpu("critic")),
    # FSDP settings: their megatron counterparts.
    "actor_rollout_ref.actor.fsdp_config.param_offload": to("actor.megatron.param_offload", "FSDP's, as megatron's",
                                                            _actor_offload),
    "actor_rollout_ref.actor.megatron.param_offload": to("actor.megatron.param_offload", "", _actor_offload),
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": to(
        "actor.megatron.optimizer_offload", "FSDP's, as megatron's: the Adam step runs on the CPU"),
    "actor_rollout_ref.actor.fsdp_config.grad_offload": to("actor.megatron.grad_offload", "FSDP's, as megatron's"),
    "actor_rollout_ref.ref.fsdp_config.param_offload": to("ref.megatron.param_offload", "FSDP's, as megatron's",
                                                          _ref_offload),
    "critic.model.fsdp_config.param_offload": to("critic.megatron.param_offload", "FSDP's, as megatron's"),
    "critic.model.fsdp_config.optimizer_offload": to(
        "critic.megatron.optimizer_offload", "FSDP's, as megatron's: the Adam step runs on the CPU"),
    "critic.model.fsdp_config.grad_offload": to("critic.megatron.grad_offload", "FSDP's, as megatron's"),
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": to(
        "actor.megatron.context_parallel_size", "Ulysses as megatron context parallelism: each rank holds a share "
        "of every sequence"),
    "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size": to(
        "actor.megatron.context_parallel_size", "Ulysses as megatron context parallelism: each rank holds a share "
        "of every sequence"),
    "critic.ulysses_sequence_parallel_size": to(
        "critic.megatron.context_parallel_size", "Ulysses as megatron context parallelism"),
    "actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload": to(
        "actor.megatron.optimizer_offload", "megatron's CPU optimizer: the Adam step runs on the CPU"),
    "actor_rollout_ref.ref.megatron.param_offload": to("ref.megatron.param_offload", "", _ref_offload),
    **{f"actor_rollout_ref.ref.megatron.{name}": to(f"actor.megatron.{name}", _REF_MESH, _as_actor(name))
       for name in (*MESH, "expert_model_parallel_size")},
    "actor_rollout_ref.actor.megatron.expert_tensor_parallel_size": to(
        "actor.megatron.tensor_model_parallel_size", _EXPERTS_TP, _experts_tp),
    "actor_rollout_ref.actor.megatron.router_replay.mode": to(
        "actor.router_replay.mode", "disabled or R3 (the rollout engine's routing replayed)"),
    "actor_rollout_ref.rollout.enable_rollout_routing_replay": to(
        "actor.router_replay.mode", "set with R3: the engine records its routing whenever the actor replays it",
        _rollout_routing),
    "actor_rollout_ref.rollout.name": to("rollout.name", "megarl generates with SGLang", _sglang),
    # No counterpart in megarl.
    "actor_rollout_ref.actor.strategy": dropped(_ONLY_MEGATRON, same_as="megatron"),
    "actor_rollout_ref.ref.strategy": dropped(_ONLY_MEGATRON, same_as="megatron"),
    "critic.strategy": dropped(_ONLY_MEGATRON, same_as="megatron"),
    "reward_model.strategy": dropped(_ONLY_MEGATRON, same_as="megatron"),
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size": dropped(_REF_MESH),
    "actor_rollout_ref.model.use_remove_padding": dropped(PACKED, same_as=True),
    "actor_rollout_ref.actor.use_remove_padding": dropped(PACKED, same_as=True),
    "critic.model.use_remove_padding": dropped(PACKED, same_as=True),
    "reward_model.model.use_remove_padding": dropped(PACKED, same_as=True),
    "actor_rollout_ref.actor.megatron.use_mbridge": dropped(_MBRIDGE, same_as=True),
    "actor_rollout_ref.actor.megatron.vanilla_mbridge": dropped(_MBRIDGE, same_as=True),
    "actor_rollout_ref.actor.megatron.use_dist_checkpointing": dropped(_MBRIDGE, same_as=False),
    "actor_rollout_ref.actor.megatron.dist_checkpointing_path": dropped(_MBRIDGE, same_as=None),
    "actor_rollout_ref.actor.megatron.override_transformer_config.recompute_method": dropped(
        "megarl's full recomputation is layer by layer (uniform, 1 layer): actor.megatron.recompute_granularity"),
    "actor_rollout_ref.actor.megatron.override_transformer_config.recompute_num_layers": dropped(
        "megarl's full recomputation is layer by layer (uniform, 1 layer): actor.megatron.recompute_granularity"),
    "actor_rollout_ref.rollout.load_format": dropped("the engines get the trainer's weights before each generation"),
    "actor_rollout_ref.hybrid_engine": dropped("the engines share the actor's GPUs unless rollout.enable_resource_pool",
                                               same_as=True),
    "actor_rollout_ref.model.use_fused_kernels": dropped(
        "megarl's log-prob and entropy pass runs over token chunks by itself (megarl/models/logprobs.py)",
        same_as=True),
    "actor_rollout_ref.actor.use_torch_compile": dropped("megarl chooses what to compile on a GPU itself",
                                                         same_as=True),
    "actor_rollout_ref.ref.use_torch_compile": dropped("megarl chooses what to compile on a GPU itself",
                                                       same_as=True),
    "actor_rollout_ref.model.use_shm": dropped("megarl reads the model from its directory", same_as=False),
    "actor_rollout_ref.rollout.multi_stage_wake_up": dropped(
        "megarl's engines always resume their weights first, their KV cache after the sync", same_as=True),
    "actor_rollout_ref.rollout.layered_summon": dropped("an FSDP LoRA setting: megarl merges LoRA weights itself"),
    "reward_model.reward_manager": dropped("megarl scores by data_source rules, reward.function or reward.model; "
                                           "DAPO's overlong shaping is reward.overlong_buffer"),
    "reward_model.reward_kwargs.max_resp_len": dropped("megarl's overlong shaping reads data.max_response_length"),
    "trainer.log_val_generations": dropped("megarl writes trainer.log_samples samples of each validation to "
                                           "{output_dir}/samples/val (`megarl view` shows them)"),
    "data.image_key": dropped("megarl trains text-only models"),
    "data.return_raw_chat": dropped("megarl's dataset applies the chat template to the prompt messages itself"),
    "trainer.use_legacy_worker_impl": dropped("verl's choice between its two worker implementations"),
}

VERL_DROPPED_PREFIXES = {
    "actor_rollout_ref.actor.fsdp_config.": "an FSDP sharding setting: megarl shards with megatron (TP/PP/CP and "
                                            "the distributed optimizer)",
    "actor_rollout_ref.ref.fsdp_config.": "an FSDP sharding setting: the reference runs in the actor's layout",
    "critic.model.fsdp_config.": "an FSDP sharding setting: megarl shards with megatron (TP/PP/CP and the "
                                 "distributed optimizer)",
    "actor_rollout_ref.ref.megatron.": _REF_MESH,
    "actor_rollout_ref.actor.megatron.override_transformer_config.": "megarl builds megatron's TransformerConfig "
                                                                     "from the HF checkpoint",
    "actor_rollout_ref.actor.optim.override_optimizer_config.": "megarl's optimizer is megatron's distributed Adam "
                                                                "(actor.optim.*, actor.megatron.optimizer_offload)",
    "actor_rollout_ref.rollout.engine_kwargs.vllm.": _VLLM,
    "actor_rollout_ref.rollout.agent.": "megarl's agent loop runs in the rollout workers, one coroutine per "
                                        "trajectory (rollout.multi_turn, docs/agents.md)",
    "actor_rollout_ref.actor.profiler.": "megarl's profiler is trainer.profile_steps and trainer.profile_tool",
    "actor_rollout_ref.actor.checkpoint.": "megarl's checkpoints hold the model, optimizer and loop state always "
                                           "(docs/checkpoints.md)",
    "critic.checkpoint.": "megarl's checkpoints hold the model, optimizer and loop state always (docs/checkpoints.md)",
    "global_profiler.": "megarl's profiler is trainer.profile_steps and trainer.profile_tool",
    "hydra.": "Hydra's own settings: megarl is not a Hydra application",
    "ray_kwargs.": "megarl starts Ray itself (RAY_ADDRESS for a running cluster)",
    "reward_model.rollout.": "megarl has no generative reward model served by a rollout engine yet",
}
VERL_KEYS.update({f"actor_rollout_ref.rollout.{name}": dropped(_VLLM) for name in (
    "enforce_eager", "free_cache_engine", "enable_chunked_prefill", "max_num_batched_tokens", "max_num_seqs",
    "max_model_len", "enable_prefix_caching", "disable_log_stats")})

# verl's defaults where megarl's differ (ppo_trainer.yaml and ppo_megatron_trainer.yaml agree on these): a converted
# recipe states them for the keys its script leaves out. A `critic.` key only matters where a critic runs.
VERL_DEFAULTS: dict[str, Any] = {
    "data.train_batch_size": 1024,
    "actor.ppo_mini_batch_size": 256,
    "rollout.tensor_model_parallel_size": 2,
    "trainer.total_epochs": 30,
    "trainer.n_gpus_per_node": 8,
    "trainer.logger": ["console", "wandb"],
    "trainer.project_name": "verl_examples",
    "trainer.experiment_name": "gsm8k",
}
VERL_FSDP_DEFAULTS: dict[str, Any] = {  # FSDP's gradient checkpointing is on by default; its reference stays resident
    "actor.megatron.recompute_granularity": "full",
    "critic.megatron.recompute_granularity": "full",
    "ref.megatron.param_offload": False,
}
VERL_MEGATRON_DEFAULTS: dict[str, Any] = {"ref.megatron.param_offload": "${actor.megatron.param_offload}"}


def port_by_table(key: str, keys: Mapping[str, Port], prefixes: Mapping[str, str],
                  dropped_prefixes: Mapping[str, str]) -> Port | None:
    if key in keys:
        return keys[key]
    matches = [(p, Port(ours + key[len(p):])) for p, ours in prefixes.items() if key.startswith(p)]
    matches += [(p, Port(None, why)) for p, why in dropped_prefixes.items() if key.startswith(p)]
    return max(matches, key=lambda match: len(match[0]))[1] if matches else None


def port_verl_key(key: str) -> Port | None:
    """Where verl's RL key `key` goes in a megarl recipe; None for a key verl and megarl spell alike."""
    return port_by_table(key, VERL_KEYS, VERL_PREFIXES, VERL_DROPPED_PREFIXES)


def renamed(key: str, megarl_key: str) -> bool:
    """Whether verl's `key` becomes `megarl_key` other than by dropping the `actor_rollout_ref.` level."""
    by_prefix = port_by_table(key, {}, VERL_PREFIXES, {})
    return megarl_key != (key if by_prefix is None else by_prefix.key)


def verl_defaults(megatron: bool) -> dict[str, Any]:
    """verl's defaults that megarl's differ from, for verl's megatron config or its FSDP one."""
    return {**VERL_DEFAULTS, **(VERL_MEGATRON_DEFAULTS if megatron else VERL_FSDP_DEFAULTS)}
