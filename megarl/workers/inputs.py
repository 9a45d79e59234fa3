"""What each worker is built from: typed values derived from a recipe once, on the driver.

A worker never sees the whole recipe (torchtitan's rule: a component takes the sub-config it needs), so a value
several roles use, such as the temperature log-probs are taken at or a role's micro-batching, has one derivation,
here, and the workers read it from their inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from megarl.config.schema import (
    ActorConfig,
    CriticConfig,
    JudgeConfig,
    LoRAConfig,
    MegaRLConfig,
    MegatronConfig,
    ModelConfig,
    MultiTurnConfig,
    OptimConfig,
    RewardConfig,
    RolloutConfig,
    SandboxConfig,
)
from megarl.config.rm_schema import RMConfig
from megarl.config.sft_schema import SFTConfig
from megarl.data.retemplate import RetemplateSource, retemplate_source
from megarl.models.packing import MicroBatching

REWARD_OUTPUT_LOG = "reward_function.log"


@dataclass(frozen=True)
class ModelSource:
    """A megatron role's starting checkpoint and the mesh it runs on."""

    path: Optional[str]  # a HF checkpoint directory (a recipe's checks refuse to run one without)
    megatron: MegatronConfig
    seed: int  # the mesh's RNG streams (and a new critic head's draw)

    @property
    def directory(self) -> str:
        return model_path(self.path, "the model's path")


@dataclass(frozen=True)
class UpdateSchedule:
    """A trained role's update over one step's batch: `epochs` passes over mini-batches of `mini_batch_samples`
    samples (all data-parallel ranks together), one optimizer step each, in micro-batches."""

    mini_batch_samples: int
    epochs: int
    micro: MicroBatching
    loss_agg_mode: str
    loss_scale_factor: int  # seq-mean-token-sum-norm's constant: the configured max response length


@dataclass(frozen=True)
class PolicyLoss:
    """The actor's loss: a registered policy loss (clip-higher and dual-clip bounds), the entropy bonus, the
    optional KL loss against the reference and the optional pretraining loss (PPO-ptx)."""

    name: str
    clip_ratio_low: float
    clip_ratio_high: float
    clip_ratio_c: float
    entropy_coeff: float
    kl_loss_coef: Optional[float]  # None: no KL loss
    kl_loss_type: str
    ptx_coef: float  # the pretraining LM loss's weight (PPO-ptx); 0: none

    @classmethod
    def of(cls, actor: ActorConfig) -> PolicyLoss:
        return cls(actor.policy_loss, actor.clip_ratio_low, actor.clip_ratio_high, actor.clip_ratio_c,
                   actor.entropy_coeff, actor.kl_loss_coef if actor.use_kl_loss else None, actor.kl_loss_type,
                   actor.ptx_coef)


@dataclass(frozen=True)
class ActorInputs:
    model: ModelSource
    optim: OptimConfig
    total_steps: int  # the LR schedule's length
    temperature: float  # log-probs are taken under the distribution the engine sampled from
    log_prob: MicroBatching
    update: UpdateSchedule
    loss: PolicyLoss
    log_prob_entropy: bool = False  # the log-prob pass also returns per-token `entropys` (for the sample logs)
    lora: Optional[LoRAConfig] = None  # None: full fine-tuning
    reference_log_prob: Optional[MicroBatching] = None  # a LoRA actor serves as the reference: its batching
    router_replay: bool = False  # R3: its passes replay the engine's routing (the batch's `routed_experts`)


@dataclass(frozen=True)
class CriticInputs:
    model: ModelSource
    optim: OptimConfig
    total_steps: int
    forward: MicroBatching
    update: UpdateSchedule
    cliprange_value: float


@dataclass(frozen=True)
class ReferenceInputs:
    model: ModelSource
    temperature: float
    log_prob: MicroBatching
    param_offload: bool  # its weights in host memory outside its passes


@dataclass(frozen=True)
class RewardModelInputs:
    model: ModelSource
    forward: MicroBatching
    resident: bool  # its weights stay on its GPUs between passes (a pool of its own) or leave (colocated)
    retemplate: Optional[RetemplateSource]  # None: it scores the policy's token ids as they are


@dataclass(frozen=True)
class JudgeInputs:
    """The judge's (reward.judge): its model, prompt, parser and sampling, the engine that serves it and the policy's
    tokenizer, which decodes the responses it reads."""

    judge: JudgeConfig
    engine: RolloutConfig  # the rollout backend (rollout.name) at the judge's share of each GPU
    policy: ModelConfig
    seed: int
    resident: bool  # on GPUs of its own: its KV cache stays between passes (beside the actor it is released)


@dataclass(frozen=True)
class StreamingReward:
    """What the rollout's async mode scores each response with, as it finishes, on the engine's owner."""

    model: ModelConfig  # its tokenizer decodes the responses
    reward: RewardConfig
    truth_only: bool  # a reward model or a judge scores too: only responses with a ground truth get a rule score
    output_log: str  # reward_output_log's


def reward_output_log(cfg: MegaRLConfig) -> str:
    """Where a user's reward function's long outputs go (megarl/rewards/pool.py): absolute, as a Ray worker's working
    directory need not be the driver's."""
    return str(Path(cfg.trainer.output_dir).expanduser().resolve() / REWARD_OUTPUT_LOG)


@dataclass(frozen=True)
class AgentInputs:
    """What the agent loop runs with (rollout.multi_turn.enable)."""

    multi_turn: MultiTurnConfig
    model: ModelConfig  # its tokenizer reads the model's calls and renders the tool messages
    sandbox: SandboxConfig  # the python tool's
    max_total_tokens: int  # prompt + every turn


@dataclass(frozen=True)
class RolloutInputs:
    model_path: Optional[str]
    train_tp: int  # the colocated actor's tensor-parallel size, which places the engines (parallel/engines.py)
    rollout: RolloutConfig
    max_response_length: int
    seed: int
    streaming_reward: Optional[StreamingReward] = None  # rollout.mode=async
    own_pool: bool = False  # rollout.enable_resource_pool: engines on GPUs of their own
    agent: Optional[AgentInputs] = None  # multi-turn rollouts
    record_routing: bool = False  # each response's routed experts, for the actor to replay (router replay, R3)


@dataclass(frozen=True)
class RoleInputs:
    """Every RL role's inputs; the critic's and the reference's are None when the recipe runs without them (or, for
    the reference, when the LoRA actor serves as it)."""

    actor: ActorInputs
    rollout: RolloutInputs
    critic: Optional[CriticInputs]
    reference: Optional[ReferenceInputs]
    reward_model: Optional[RewardModelInputs] = None
    judge: Optional[JudgeInputs] = None


def logprob_temperature(rollout: RolloutConfig) -> float:
    """The temperature the trainer's log-probs are taken at: the sampling one, or 1 for greedy sampling (its
    log-probs are the untempered distribution's)."""
    return rollout.temperature or 1.0


def _update_schedule(section: ActorConfig | CriticConfig, samples_per_prompt: int,
                     max_response_length: int) -> UpdateSchedule:
    """The actor's or the critic's update: their sections share these keys (verl's names)."""
    micro = MicroBatching(section.use_dynamic_bsz, section.ppo_micro_batch_size_per_gpu,
                          section.ppo_max_token_len_per_gpu)
    return UpdateSchedule(section.ppo_mini_batch_size * samples_per_prompt, section.ppo_epochs, micro,
                          section.loss_agg_mode, max_response_length)


def model_path(path: str | None, key: str) -> str:
    """A model directory the run needs (a recipe's checks refuse to run one without)."""
    if path is None:
        raise ValueError(f"{key} is not set: name a HF checkpoint directory")
    return path


def _policy_model(cfg: MegaRLConfig) -> ModelSource:
    """The actor's, which the reference shares: it runs in the actor's processes, on its mesh."""
    return ModelSource(cfg.model.path, cfg.actor.megatron, cfg.trainer.seed)


def actor_inputs(cfg: MegaRLConfig, total_steps: int) -> ActorInputs:
    actor = cfg.actor
    return ActorInputs(
        _policy_model(cfg), actor.optim, total_steps,
        logprob_temperature(cfg.rollout),
        MicroBatching(actor.use_dynamic_bsz, actor.log_prob_micro_batch_size_per_gpu,
                      actor.log_prob_max_token_len_per_gpu),
        _update_schedule(actor, cfg.rollout.n, cfg.data.max_response_length), PolicyLoss.of(actor),
        cfg.trainer.samples_logged, actor.lora if actor.lora.rank else None,
        _reference_log_prob(cfg) if cfg.use_reference and not cfg.reference_model else None,
        actor.router_replay.replays_rollout)


def critic_inputs(cfg: MegaRLConfig, total_steps: int) -> CriticInputs:
    critic = cfg.critic
    return CriticInputs(
        ModelSource(critic.model.path, critic.megatron, cfg.trainer.seed), critic.optim, total_steps,
        MicroBatching(critic.use_dynamic_bsz, critic.forward_micro_batch_size_per_gpu,
                      critic.forward_max_token_len_per_gpu),
        _update_schedule(critic, cfg.rollout.n, cfg.data.max_response_length), critic.cliprange_value)


def _reference_log_prob(cfg: MegaRLConfig) -> MicroBatching:
    """Micro-batched like the actor's log-prob pass (the `ref` section has no use_dynamic_bsz of its own)."""
    return MicroBatching(cfg.actor.use_dynamic_bsz, cfg.ref.log_prob_micro_batch_size_per_gpu,
                         cfg.ref.log_prob_max_token_len_per_gpu)


def reference_inputs(cfg: MegaRLConfig) -> ReferenceInputs:
    return ReferenceInputs(_policy_model(cfg), logprob_temperature(cfg.rollout), _reference_log_prob(cfg),
                           cfg.ref.megatron.param_offload)


def reward_model_inputs(cfg: MegaRLConfig) -> RewardModelInputs:
    """Whether the reward model needs its inputs re-encoded is decided here, once, from both tokenizers."""
    model, path = cfg.reward.model, model_path(cfg.reward.model.path, "reward.model.path")
    retemplate = retemplate_source(cfg.model.tokenizer_path or model_path(cfg.model.path, "model.path"), path,
                                   model.chat_template, cfg.model.trust_remote_code)
    return RewardModelInputs(ModelSource(path, model.megatron, cfg.trainer.seed),
                             MicroBatching(model.use_dynamic_bsz, model.micro_batch_size_per_gpu,
                                           model.max_token_len_per_gpu),
                             resident=model.enable_resource_pool, retemplate=retemplate)


def judge_inputs(cfg: MegaRLConfig) -> JudgeInputs:
    """Its engine is the rollout backend's, of one GPU on each rank (the actor's or its own pool's), at the judge's
    own share of it."""
    judge = cfg.reward.judge
    model_path(judge.model.path, "reward.judge.model.path")
    engine = RolloutConfig(name=cfg.rollout.name, gpu_memory_utilization=judge.gpu_memory_utilization,
                           engine_kwargs=dict(judge.engine_kwargs))
    return JudgeInputs(judge, engine, cfg.model, cfg.trainer.seed, resident=judge.enable_resource_pool)


def rollout_inputs(cfg: MegaRLConfig) -> RolloutInputs:
    streaming = (StreamingReward(cfg.model, cfg.reward, cfg.reward.scored_by_models, reward_output_log(cfg))
                 if cfg.rollout.mode == "async" else None)
    return RolloutInputs(cfg.model.path, cfg.actor.megatron.tensor_model_parallel_size, cfg.rollout,
                         cfg.data.max_response_length, cfg.trainer.seed, streaming, cfg.rollout.enable_resource_pool,
                         agent_inputs(cfg), cfg.actor.router_replay.replays_rollout)


def agent_inputs(cfg: MegaRLConfig) -> Optional[AgentInputs]:
    multi_turn = cfg.rollout.multi_turn
    if not multi_turn.enable:
        return None
    total = multi_turn.max_total_tokens or cfg.data.max_prompt_length + cfg.data.max_response_length
    return AgentInputs(multi_turn, cfg.model, cfg.reward.sandbox, total)


def role_inputs(cfg: MegaRLConfig, total_steps: int) -> RoleInputs:
    """The inputs of the roles the recipe runs."""
    return RoleInputs(actor_inputs(cfg, total_steps), rollout_inputs(cfg),
                      critic_inputs(cfg, total_steps) if cfg.use_critic else None,
                      reference_inputs(cfg) if cfg.reference_model else None,
                      reward_model_inputs(cfg) if cfg.reward.model.path else None,
                      judge_inputs(cfg) if cfg.reward.judge.model.path else None)


@dataclass(frozen=True)
class SFTInputs:
    model: ModelSource
    optim: OptimConfig
    total_steps: int
    micro: MicroBatching
    tokenizer_path: Optional[str]  # saved beside the trained weights when the model directory has no tokenizer
    trust_remote_code: bool


def sft_inputs(cfg: SFTConfig, total_steps: int) -> SFTInputs:
    data = cfg.data
    return SFTInputs(ModelSource(cfg.model.path, cfg.actor.megatron, cfg.trainer.seed), cfg.optim, total_steps,
                     MicroBatching(data.use_dynamic_bsz, data.micro_batch_size_per_gpu, data.max_token_len_per_gpu),
                     cfg.model.tokenizer_path, cfg.model.trust_remote_code)


@dataclass(frozen=True)
class RMInputs:
    """The reward model's training (`megarl rm`)."""

    model: ModelSource
    optim: OptimConfig
    total_steps: int
    micro: MicroBatching  # over rankings: a micro-batch holds every response of each of its rankings
    margin: float  # the ranking loss's margin (megarl.algorithms.ranking)
    tokenizer_path: Optional[str]  # None: the model directory's tokenizer, saved beside the trained weights
    trust_remote_code: bool


def rm_inputs(cfg: RMConfig, total_steps: int) -> RMInputs:
    data = cfg.data
    return RMInputs(ModelSource(cfg.model.path, cfg.critic.megatron, cfg.trainer.seed), cfg.optim, total_steps,
                    MicroBatching(data.use_dynamic_bsz, data.micro_batch_size_per_gpu, data.max_token_len_per_gpu),
                    cfg.rm.margin, cfg.model.tokenizer_path, cfg.model.trust_remote_code)
