"""The recipe schema: typed, frozen dataclasses. Every default lives here and nowhere else.

Values that follow another (the critic's mini-batch follows the actor's unless set) are OmegaConf
interpolations, resolved when a recipe is loaded; the written config shows them resolved.
Key names follow verl's where verl has one (docs/verl-keys.md maps the rest).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import II


@dataclass(frozen=True)
class DataConfig:
    train_files: List[str] = field(default_factory=list)  # parquet files in verl's row schema
    val_files: List[str] = field(default_factory=list)
    prompt_key: str = "prompt"
    max_prompt_length: int = 512
    max_response_length: int = 512
    train_batch_size: int = 64  # prompts per step (each sampled rollout.n times)
    gen_batch_size: Optional[int] = None  # prompts per generation round with algorithm.filter_groups; None: as above
    val_batch_size: Optional[int] = None  # None: the whole validation set at once
    filter_overlong_prompts: bool = False  # drop prompts longer than max_prompt_length
    truncation: str = "error"  # error | left | right | middle, for overlong prompts that were not dropped
    shuffle: bool = True
    # PPO-ptx (actor.ptx_coef): pretraining data, prompt/response pairs as SFT reads them, or plain text in
    # ptx_response_key with ptx_prompt_key null (the loss then covers every token but the first).
    ptx_files: List[str] = field(default_factory=list)
    ptx_prompt_key: Optional[str] = "prompt"
    ptx_response_key: str = "extra_info.answer"

    @property
    def generation_batch_size(self) -> int:
        return self.gen_batch_size if self.gen_batch_size is not None else self.train_batch_size


@dataclass(frozen=True)
class ModelConfig:
    path: Optional[str] = None  # a local HF checkpoint directory
    tokenizer_path: Optional[str] = None  # None: the tokenizer saved with the model
    trust_remote_code: bool = False


@dataclass(frozen=True)
class MegatronConfig:
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    context_parallel_size: int = 1
    # A mixture-of-experts model's experts split over this many ranks of the data-parallel ones (each rank holds
    # num_experts / EP of them; tokens travel to their experts' ranks). The experts' tensor parallelism is the
    # layers' (megatron's default expert_tensor_parallel_size).
    expert_model_parallel_size: int = 1
    # A mixture-of-experts model's router losses, added to the update's (megatron's; verl sets them under
    # megatron.override_transformer_config): the load-balancing loss's weight and the router z-loss's (0: off).
    moe_aux_loss_coeff: float = 0.0
    moe_z_loss_coeff: float = 0.0
    # What leaves the GPU between the role's own calls (parallel/offload.py; docs/memory.md has the costs):
    param_offload: bool = False  # the weights, to pinned host memory
    grad_offload: bool = False  # the gradient buffers (freed; the next update starts from zero anyway)
    optimizer_offload: bool = False  # fp32 master weights and Adam moments in host memory, the step on the CPU
    # The gradient buffers' dtype in bf16 training: float32 (megatron's accumulate-in-fp32), or the weights' bf16,
    # which halves them at the cost of accumulating micro-batches' gradients in bf16 (docs/memory.md)
    grad_reduce_in_fp32: bool = True
    recompute_granularity: Optional[str] = None  # None | full | selective
    # The transformer layers: megatron-core's local spec with megarl's swaps (the path CI and the GPU tests run), or
    # Transformer Engine's (transformer_engine: needs TE importable). auto: local, the faster of the two at every
    # size measured (docs/models.md).
    transformer_impl: str = "auto"  # auto | local | transformer_engine

    @property
    def model_parallel_size(self) -> int:
        return self.tensor_model_parallel_size * self.pipeline_model_parallel_size * self.context_parallel_size


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-6
    min_lr: float = 0.0
    weight_decay: float = 0.01
    betas: List[float] = field(default_factory=lambda: [0.9, 0.999])
    clip_grad: float = 1.0
    lr_warmup_steps: int = 0
    lr_decay_style: str = "constant"  # constant | linear | cosine


LORA_TARGETS = ("linear_qkv", "linear_proj", "linear_fc1", "linear_fc2")  # the megatron layers LoRA can adapt


@dataclass(frozen=True)
class LoRAConfig:
    """LoRA on the actor's linear layers (megarl/models/lora.py): only the adapters train; the reference is the actor
    with its adapters disabled; the rollout engine gets merged weights."""

    rank: int = 0  # 0: off (full fine-tuning)
    alpha: float = 16.0  # the adapters' output is scaled by alpha / rank
    target_modules: List[str] = field(default_factory=lambda: list(LORA_TARGETS))
    dropout: float = 0.0  # on the adapters' input


ROUTER_REPLAY_MODES = ("disabled", "R3")  # verl's names; its R2 (the trainer's own routing, replayed) is not built


@dataclass(frozen=True)
class RouterReplayConfig:
    """Router replay of a mixture-of-experts policy (verl's `router_replay`): R3 replays the experts the rollout
    engine routed each token to in the actor's old-log-prob and update passes (docs/models.md)."""

    mode: str = "disabled"

    @property
    def replays_rollout(self) -> bool:
        return self.mode == "R3"


@dataclass(frozen=True)
class ActorConfig:
    megatron: MegatronConfig = field(default_factory=MegatronConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    router_replay: RouterReplayConfig = field(default_factory=RouterReplayConfig)
    ppo_mini_batch_size: int = 32  # prompts per optimizer step, as in verl (× rollout.n samples)
    ppo_micro_batch_size_per_gpu: int = 1
    use_dynamic_bsz: bool = False  # micro-batches by token budget instead of sample count
    ppo_max_token_len_per_gpu: int = 16384
    log_prob_micro_batch_size_per_gpu: int = II(".ppo_micro_batch_size_per_gpu")
    log_prob_max_token_len_per_gpu: int = II(".ppo_max_token_len_per_gpu")
    ppo_epochs: int = 1
    clip_ratio: float = 0.2
    clip_ratio_low: float = II(".clip_ratio")
    clip_ratio_high: float = II(".clip_ratio")
    clip_ratio_c: float = 3.0  # dual-clip bound for negative advantages
    loss_agg_mode: str = "token-mean"
    policy_loss: str = "vanilla"
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    ptx_coef: float = 0.0  # PPO-ptx: each update adds ptx_coef × the LM loss of data.ptx_files samples; 0: off


@dataclass(frozen=True)
class RefMegatronConfig:
    """The reference runs in the actor's processes with the actor's parallel layout; only its residency is its own."""

    # The weights in pinned host memory outside the reference's pass (true), or on the GPU throughout (false: 2 bytes
    # per parameter held in every phase, the weights' copy in each pass saved; docs/memory.md).
    param_offload: bool = True


@dataclass(frozen=True)
class RefConfig:
    megatron: RefMegatronConfig = field(default_factory=RefMegatronConfig)
    log_prob_micro_batch_size_per_gpu: int = II("actor.log_prob_micro_batch_size_per_gpu")
    log_prob_max_token_len_per_gpu: int = II("actor.log_prob_max_token_len_per_gpu")


@dataclass(frozen=True)
class CriticConfig:
    model: ModelConfig = field(default_factory=lambda: ModelConfig(path=II("model.path")))
    megatron: MegatronConfig = field(default_factory=MegatronConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    ppo_mini_batch_size: int = II("actor.ppo_mini_batch_size")
    ppo_micro_batch_size_per_gpu: int = II("actor.ppo_micro_batch_size_per_gpu")
    forward_micro_batch_size_per_gpu: int = II(".ppo_micro_batch_size_per_gpu")
    use_dynamic_bsz: bool = II("actor.use_dynamic_bsz")
    ppo_max_token_len_per_gpu: int = 32768
    forward_max_token_len_per_gpu: int = II(".ppo_max_token_len_per_gpu")
    ppo_epochs: int = II("actor.ppo_epochs")
    cliprange_value: float = 0.5
    loss_agg_mode: str = II("actor.loss_agg_mode")
    enable_resource_pool: bool = False  # True: the critic gets its own GPUs (nnodes × n_gpus_per_node; Ray only)
    nnodes: int = II("trainer.nnodes")
    n_gpus_per_node: int = II("trainer.n_gpus_per_node")


@dataclass(frozen=True)
class ValSamplingConfig:
    n: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    do_sample: bool = False  # False: greedy, whatever the temperature


ROLLOUT_MODES = ("sync", "async")


@dataclass(frozen=True)
class MultiTurnConfig:
    """The agent loop (megarl/agent, docs/agents.md): the model's turns alternate with the results of the tools it
    calls, until it answers without a call or a limit is reached."""

    enable: bool = False
    max_assistant_turns: int = 5
    max_total_tokens: Optional[int] = None  # prompt + every turn; None: data.max_prompt_length + max_response_length
    tools: List[str] = field(default_factory=lambda: ["python"])  # registered names or path/to/file.py:Class
    format: str = "hermes"  # how the model writes a call: <tool_call>{"name": ..., "arguments": {...}}</tool_call>
    max_tool_response_length: int = 512  # characters of a tool's output shown to the model; the rest is cut
    tool_timeout_s: float = 30.0  # a call still running is abandoned, the model told so (tool/timeouts)


@dataclass(frozen=True)
class RolloutConfig:
    name: str = "sglang"  # sglang | transformers
    # async: one engine request per response, each scored as it finishes while the rest generate (docs/rollout.md)
    mode: str = "sync"
    # Engines on GPUs of their own (Ray, or torchrun with their processes too): weights reach them over a bridge, and
    # trainer.staleness lets them run ahead
    enable_resource_pool: bool = False
    nnodes: int = 1
    n_gpus_per_node: int = 1
    tensor_model_parallel_size: int = 1
    n: int = 1  # responses sampled per prompt
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    # Training samples run to data.max_response_length past an end-of-sequence token (verl's key; validation keeps it):
    # a benchmark's fixed lengths, as random weights give them
    ignore_eos: bool = False
    gpu_memory_utilization: float = 0.5  # the engine's share of GPU memory (SGLang mem_fraction_static)
    # The engine returns each sampled token's log-prob (verl's key): rollout/logprob_mult_error and rollout correction
    # read them; false spares the engine that work (docs/rollout.md says what it costs)
    calculate_log_probs: bool = True
    max_logprob_mult_error: Optional[float] = None  # stop when rollout/logprob_mult_error exceeds it (e.g. 1.05)
    val_kwargs: ValSamplingConfig = field(default_factory=ValSamplingConfig)
    engine_kwargs: Dict[str, Any] = field(default_factory=dict)  # passed to the engine as they are
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)


@dataclass(frozen=True)
class KLControlConfig:
    type: str = "fixed"  # fixed | adaptive
    kl_coef: float = 0.001
    horizon: int = 10000
    target_kl: float = 0.1


@dataclass(frozen=True)
class FilterGroupsConfig:
    """DAPO's dynamic sampling: train only on groups whose responses differ in `metric`, generating more rounds of
    data.gen_batch_size prompts until data.train_batch_size such groups are there."""

    enable: bool = False
    metric: str = "acc"  # acc: the reward function's "acc" (else its score) | seq_reward: the shaped score
    max_num_gen_batches: int = 10  # rounds per step at most (0: no limit); then the step trains on what it has


@dataclass(frozen=True)
class RolloutCorrectionConfig:
    """verl's rollout correction, decoupled mode: megarl/algorithms/rollout_correction.py."""

    rollout_is: Optional[str] = None  # token | sequence: weights π_old/π_rollout on the policy-gradient loss
    rollout_is_threshold: float = 2.0  # the weights' truncation
    rollout_rs: Optional[str] = None  # token | sequence | geometric: reject ratios outside the bounds
    rollout_rs_threshold: Optional[float] = None  # the upper bound; None: rollout_is_threshold
    rollout_rs_threshold_lower: Optional[float] = None  # None: 1 / the upper bound
    rollout_token_veto_threshold: Optional[float] = None  # a token ratio below it rejects its sequence

    @property
    def enabled(self) -> bool:
        return (self.rollout_is, self.rollout_rs, self.rollout_token_veto_threshold) != (None, None, None)

    @property
    def rs_upper(self) -> float:
        return self.rollout_rs_threshold if self.rollout_rs_threshold is not None else self.rollout_is_threshold

    @property
    def rs_lower(self) -> float:
        lower = self.rollout_rs_threshold_lower
        return lower if lower is not None else 1.0 / self.rs_upper


@dataclass(frozen=True)
class AlgorithmConfig:
    adv_estimator: str = "gae"  # gae | grpo | rloo | reinforce_plus_plus | reinforce_plus_plus_baseline | remax
    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std_in_grpo: bool = True  # False + loss_agg_mode=seq-mean-token-sum-norm is Dr.GRPO
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"  # the KL estimator used in the reward
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)


@dataclass(frozen=True)
class OverlongBufferConfig:
    """DAPO's overlong shaping: a response longer than data.max_response_length − len tokens loses up to
    penalty_factor, linearly, at the limit (training rewards only; validation scores stay unshaped)."""

    enable: bool = False
    len: int = 0
    penalty_factor: float = 1.0


@dataclass(frozen=True)
class SandboxConfig:
    """Where model-written programs run (megarl/sandbox): walled off by bubblewrap (or, without it, fresh user
    namespaces), in a throwaway directory, under these limits; `workers` at a time (docs/agents.md)."""

    backend: str = "auto"  # auto (bwrap, else unshare) | bwrap | unshare
    workers: int = 8  # programs running at once
    wall_s: float = 10.0  # a program still running is killed (reward/num_timeouts)
    cpu_s: float = 5.0  # CPU seconds, all of its processes' each (RLIMIT_CPU)
    memory_mb: int = 1024  # address space of each of its processes (RLIMIT_AS)
    processes: int = 16  # processes and threads at once (RLIMIT_NPROC)
    output_bytes: int = 1 << 20  # stdout, stderr and each file it writes (RLIMIT_FSIZE); longer output kills it
    python: Optional[str] = None  # the interpreter programs run with (None: megarl's own)


@dataclass(frozen=True)
class CodeRewardConfig:
    """The code reward (data_source code, apps, taco, codecontests, ...): the response's program against the tests in
    the row's ground truth, each test a sandboxed run."""

    mode: str = "fraction"  # fraction: the share of tests passed | all: 1 only if every test passes


@dataclass(frozen=True)
class RewardModelConfig:
    """A reward model that scores each prompt + response at its last token: `megarl rm`'s hf/ output, or any HF
    sequence-classification checkpoint with a `score.weight` of one label. By default it runs in the actor's
    processes, on the actor's megatron mesh, its weights in host memory between its passes (as the reference's);
    with `enable_resource_pool` it has GPUs (and a mesh) of its own and its weights stay there.
    Where its tokenizer or chat template differs from the policy's (or `chat_template` is set), each response is
    decoded and the prompt + response encoded again as `megarl rm` encodes them: the prompt through the reward
    model's chat template with the generation prompt, the response text, its eos where the policy's response ended."""

    path: Optional[str] = None  # None: no reward model
    weight: float = 1.0  # each response's score is rule_weight × rule score + weight × this model's score
    megatron: MegatronConfig = field(default_factory=MegatronConfig)
    chat_template: Optional[str] = None  # a Jinja chat template for the reward model's inputs (None: its tokenizer's)
    enable_resource_pool: bool = False  # True: GPUs of its own (nnodes × n_gpus_per_node; Ray only)
    nnodes: int = II("trainer.nnodes")
    n_gpus_per_node: int = II("trainer.n_gpus_per_node")
    use_dynamic_bsz: bool = II("actor.use_dynamic_bsz")
    micro_batch_size_per_gpu: int = II("actor.log_prob_micro_batch_size_per_gpu")
    max_token_len_per_gpu: int = II("actor.log_prob_max_token_len_per_gpu")


JUDGE_PROMPT = ("Here is a question and an answer to it.\n\nQuestion: {prompt}\n\nAnswer: {response}\n\n"
                "How correct is the answer, from 0 to 10? End with the number.")


@dataclass(frozen=True)
class JudgeParseConfig:
    """How the judge's score is read (megarl/rewards/judge.py's JUDGE_PARSERS)."""

    type: str = "last_number"  # last_number | regex | yes_no
    min: float = 0.0  # last_number: its scale; a last number outside [min, max] does not parse
    max: float = 10.0
    pattern: Optional[str] = None  # regex: the score is this group of the pattern's last match in the judge's text
    group: int = 1
    # yes_no: one token each; the score is the softmax over the two words' logits for the judge's first token (the
    # probability of `yes`), read from its next-token log-probs instead of a generated word
    yes: str = "yes"
    no: str = "no"


@dataclass(frozen=True)
class JudgeSamplingConfig:
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 64  # the judge's output, cut here (what it wrote so far is parsed)


@dataclass(frozen=True)
class JudgeConfig:
    """An LLM as judge (docs/judge.md): a HF causal LM, served by an engine of the rollout backend (`rollout.name`)
    in the actor's processes or on GPUs of its own, reads `prompt` rendered for each response (through its own chat
    template) and its answer is parsed into a score. Beside the actor its engine's KV cache is released outside its
    pass (its weights stay)."""

    model: ModelConfig = field(default_factory=ModelConfig)  # path None: no judge
    # Over {prompt} (the row's question: a chat prompt's last user message), {response} (the policy's text),
    # {ground_truth} and the row's extra_info fields by name
    prompt: str = JUDGE_PROMPT
    parse: JudgeParseConfig = field(default_factory=JudgeParseConfig)
    sampling: JudgeSamplingConfig = field(default_factory=JudgeSamplingConfig)
    weight: float = 1.0  # each response's score gets weight × the judge's, as reward.model.weight's
    unparsed_score: float = 0.0  # the score of a judge output that does not parse (reward/judge_unparsed counts them)
    gpu_memory_utilization: float = 0.2  # its engine's share of each GPU (SGLang's mem_fraction_static)
    engine_kwargs: Dict[str, Any] = field(default_factory=dict)  # passed to its engine as they are
    # True: GPUs of its own (nnodes × n_gpus_per_node, an engine on each), its KV cache kept between passes
    enable_resource_pool: bool = False
    nnodes: int = 1
    n_gpus_per_node: int = 1


@dataclass(frozen=True)
class RewardConfig:
    function: Optional[str] = None  # path/to/file.py:function or package.module:function; None: rules by data_source
    kwargs: Dict[str, Any] = field(default_factory=dict)  # extra keyword arguments for the function
    timeout_s: float = 60.0  # a function call running longer scores 0 (reward/num_timeouts); its process is replaced
    workers: int = 8  # processes that run reward.function (rule rewards run in the driver: they cannot hang)
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    model: RewardModelConfig = field(default_factory=RewardModelConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    code: CodeRewardConfig = field(default_factory=CodeRewardConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    # The rule (or reward.function) score's weight; 0 with a reward model or a judge: they alone reward, the rules
    # are still computed (reward/rule_score/mean, e.g. a rule-checked accuracy).
    rule_weight: float = 1.0

    @property
    def scored_by_models(self) -> bool:
        """Whether a reward model or a judge scores responses beside the rules."""
        return bool(self.model.path or self.judge.model.path)


@dataclass(frozen=True)
class RunConfig:
    """What every megarl run (RL or SFT) has: names, length, loggers, seed, cluster shape, launcher."""

    project_name: str = "megarl"
    experiment_name: str = "default"
    output_dir: str = "outputs/${trainer.project_name}/${trainer.experiment_name}"
    total_epochs: int = 1
    total_training_steps: Optional[int] = None  # None: total_epochs over the data
    logger: List[str] = field(default_factory=lambda: ["console"])  # console | tensorboard | wandb
    seed: int = 1
    nnodes: int = 1
    n_gpus_per_node: int = 1
    launcher: str = "auto"  # auto (torchrun when started by torchrun, else Ray) | ray | torchrun
    collective_timeout_s: int = 600  # a collective waiting longer than this fails the run (a dead rank)
    log_interval: Optional[int] = None  # steps between console lines (and validations, the last step); None: ~20 a run


# The checks megarl/trainer/health.py runs, by the names trainer.health.stop_on takes.
HEALTH_CHECKS = ("ppo_kl", "grad_norm", "entropy_collapse", "response_clipping", "logprob_mismatch",
                 "zero_advantages", "val_stall")


@dataclass(frozen=True)
class HealthConfig:
    """Checks after each step (megarl/trainer/health.py): `health/<check>` is 1 on a breach, with one console line
    saying what to do; a check named in stop_on ends the run (after a checkpoint)."""

    enable: bool = True
    ppo_kl_max: float = 0.05  # actor/ppo_kl above it: updates move too far
    ppo_kl_min: Optional[float] = None  # below it: updates barely move (off: ~0 is normal with few mini-batches)
    grad_norm_max: float = 10.0  # actor/grad_norm above it (above 100 training usually diverges)
    entropy_collapse_ratio: float = 0.1  # actor/entropy below this fraction of step 1's
    response_clip_ratio_max: float = 0.2  # response_length/clip_ratio above it: responses cut at the limit
    logprob_mult_error_max: float = 1.05  # rollout/logprob_mult_error above it: engine and trainer disagree
    val_patience: int = 3  # validations without a new best before the run is called stalled
    stop_on: List[str] = field(default_factory=list)  # check names, e.g. [grad_norm, logprob_mismatch]


@dataclass(frozen=True)
class TrainerConfig(RunConfig):
    save_freq: int = -1  # steps between checkpoints (and one at the last step); -1: never. docs/checkpoints.md
    test_freq: int = -1  # steps between validations; -1: never
    val_before_train: bool = True
    max_ckpt_to_keep: Optional[int] = None  # None: keep every checkpoint
    resume_mode: str = "auto"  # auto (the newest complete checkpoint, if any) | disable | resume_path
    resume_from_path: Optional[str] = None  # a global_step_K directory, with resume_mode=resume_path
    critic_warmup: int = 0  # steps that update only the critic
    # With rollout.enable_resource_pool: generation for step t + staleness runs while step t trains (0: in turn)
    staleness: int = 0
    # On a GPU machine, refuse a launch whose predicted per-GPU or per-node memory does not fit (`megarl plan`,
    # docs/memory.md); false launches anyway, e.g. when the prediction is wrong for your setup.
    memory_check: bool = True
    health: HealthConfig = field(default_factory=HealthConfig)
    # Sample logs (megarl/trainer/samples.py, read by `megarl view`): per step, log_samples of the batch's samples
    # (0: none; -1: the whole batch, as verl writes) as {step}.jsonl in rollout_data_dir, and as many validation
    # samples in validation_data_dir; None: {output_dir}/samples/train and {output_dir}/samples/val.
    log_samples: int = 4
    rollout_data_dir: Optional[str] = None
    validation_data_dir: Optional[str] = None
    # Steps recorded with a profiler, in {output_dir}/profile/step_k/ with the step's phase timeline
    # (megarl/trainer/profiling.py). Empty: none.
    profile_steps: List[int] = field(default_factory=list)
    # torch: a Chrome trace per worker process (ops, kernels, role calls); torch_memory: a snapshot per worker
    # process of the CUDA caching allocator's history and segments (https://pytorch.org/memory_viz;
    # benchmarks/memory_snapshot.py). verl's global_profiler.tool.
    profile_tool: str = "torch"

    @property
    def samples_logged(self) -> bool:
        return self.log_samples != 0


@dataclass(frozen=True)
class MegaRLConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

    @property
    def world_size(self) -> int:
        """GPUs of the main pool: actor, rollout and reference (and a colocated critic)."""
        return self.trainer.nnodes * self.trainer.n_gpus_per_node

    @property
    def critic_world_size(self) -> int:
        if self.critic.enable_resource_pool:
            return self.critic.nnodes * self.critic.n_gpus_per_node
        return self.world_size

    @property
    def reward_model_world_size(self) -> int:
        if self.reward.model.enable_resource_pool:
            return self.reward.model.nnodes * self.reward.model.n_gpus_per_node
        return self.world_size

    @property
    def judge_world_size(self) -> int:
        """The judge's engines: one on each GPU of the main pool, or of its own."""
        if self.reward.judge.enable_resource_pool:
            return self.reward.judge.nnodes * self.reward.judge.n_gpus_per_node
        return self.world_size

    @property
    def judge_streams(self) -> bool:
        """Whether the judge judges each response as it finishes (rollout.mode=async): where its engine shares the
        rollout engine's processes, both beside the actor. Elsewhere it judges the batch after generation."""
        return (self.rollout.mode == "async" and bool(self.reward.judge.model.path)
                and not self.reward.judge.enable_resource_pool and not self.rollout.enable_resource_pool)

    @property
    def rollout_world_size(self) -> int:
        """GPUs of the rollout engines: the main pool's, or their own."""
        if self.rollout.enable_resource_pool:
            return self.rollout.nnodes * self.rollout.n_gpus_per_node
        return self.world_size

    @property
    def gpus(self) -> int:
        """Every GPU of the run: the main pool's and those of each role with a pool of its own."""
        own = [(self.critic.enable_resource_pool and self.use_critic, self.critic_world_size),
               (self.reward.model.enable_resource_pool and bool(self.reward.model.path), self.reward_model_world_size),
               (self.reward.judge.enable_resource_pool and bool(self.reward.judge.model.path), self.judge_world_size),
               (self.rollout.enable_resource_pool, self.rollout_world_size)]
        return self.world_size + sum(size for has_own, size in own if has_own)

    @property
    def use_critic(self) -> bool:
        return self.algorithm.adv_estimator == "gae"

    @property
    def use_reference(self) -> bool:
        return self.algorithm.use_kl_in_reward or self.actor.use_kl_loss

    @property
    def reference_model(self) -> bool:
        """Whether the reference is a model of its own: a LoRA actor's reference is the actor without adapters."""
        return self.use_reference and self.actor.lora.rank == 0

    def dp_size(self, role: str) -> int:
        """Data-parallel size of the actor or the critic."""
        if role == "critic":
            return self.critic_world_size // self.critic.megatron.model_parallel_size
        return self.world_size // self.actor.megatron.model_parallel_size
