"""What a memory plan is computed from: the loaded recipe, the models' shapes, the machine's memory and the
calibration; and the recipe changes the advice tries, applied to the loaded recipe as `key=value` overrides are."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass, replace
from functools import reduce
from typing import Any, Mapping

from megarl.config import ConfigError, MegaRLConfig
from megarl.models.shapes import heads_split_problem
from megarl.plan.calibration import GIB, Calibration, gib
from megarl.plan.result import Parts
from megarl.plan.shape import ModelShape


@dataclass(frozen=True)
class Mesh:
    tp: int
    pp: int
    cp: int
    dp: int
    ep: int = 1

    @property
    def optimizer_shards(self) -> int:
        """megatron's distributed optimizer shards its state over the data- and context-parallel ranks."""
        return self.dp * self.cp

    @property
    def expert_optimizer_shards(self) -> int:
        """An expert's state is sharded over the ranks that hold the same experts: the expert data-parallel ones."""
        return self.dp * self.cp // self.ep


@dataclass(frozen=True)
class PlanInputs:
    cfg: MegaRLConfig
    policy: ModelShape  # the actor's, the reference's and the engine's
    critic: ModelShape  # the critic's trunk (its own model.path may differ); used only with a critic
    gpu_bytes: int
    host_bytes: int
    calibration: Calibration = field(default_factory=Calibration)
    # Per phase, a measured run's largest micro-batch in tokens, in place of the recipe's worst case (every prompt at
    # max_prompt_length): benchmarks/plan_check.py's check of the memory model against runs whose prompts were shorter.
    micro_batch_tokens: Mapping[str, int] = field(default_factory=dict)
    judge: ModelShape | None = None  # reward.judge's model (None without a judge)

    def mesh(self, role: str) -> Mesh:
        """The actor's (which the reference shares) or the critic's."""
        megatron = self.cfg.critic.megatron if role == "critic" else self.cfg.actor.megatron
        return Mesh(megatron.tensor_model_parallel_size, megatron.pipeline_model_parallel_size,
                    megatron.context_parallel_size, self.cfg.dp_size("critic" if role == "critic" else "actor"),
                    megatron.expert_model_parallel_size)

    @property
    def sequence_tokens(self) -> int:
        return self.cfg.data.max_prompt_length + self.cfg.data.max_response_length

    def free_at_engine_start(self, world: int, resident: Parts) -> int:
        """What an engine finds free on its GPU when it starts (SGLang's `free_at_start`): the GPU less its worker
        process's memory outside torch (in a world of `world` GPUs), the engine's CUDA context and `resident`."""
        cal = self.calibration
        return (self.gpu_bytes - cal.trainer_process(world) - gib(cal.cuda_context_gib)
                - sum(size for _, size in resident))

    def with_changes(self, changes: Mapping[str, Any]) -> PlanInputs:
        return replace(self, cfg=with_keys(self.cfg, changes))


def get_key(config: Any, key: str) -> Any:
    """The value of a dotted key (`actor.megatron.param_offload`) of a loaded config."""
    return reduce(getattr, key.split("."), config)


def with_keys(config: Any, changes: Mapping[str, Any]) -> Any:
    """A copy of the frozen config with dotted keys set (values already typed, unlike override strings)."""
    nested: dict[str, Any] = {}
    for key, value in changes.items():
        head, _, rest = key.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            nested[head] = value
    names = {f.name for f in fields(config)}
    unknown = sorted(set(nested) - names)
    if unknown:
        raise KeyError(f"{type(config).__name__} has no {', '.join(unknown)}")
    return replace(config, **{
        name: with_keys(getattr(config, name), value) if isinstance(value, dict) and is_dataclass(getattr(config, name))
        else value
        for name, value in nested.items()
    })


def override(key: str, value: Any) -> str:
    """`key=value` as `megarl train` takes it."""
    return f"{key}={str(value).lower() if isinstance(value, bool) else value}"


def plan_inputs(cfg: MegaRLConfig, gpu_gib: float, host_gib: float, shape_name: str | None = None,
                layers: int | None = None) -> tuple[PlanInputs, str]:
    """The inputs for `cfg`, with its models' shapes read from model.path's (and a critic's own critic.model.path's)
    config.json, or `shape_name` of megarl.models.shapes for every role; `layers` replaces the layer count. Also
    says where the shape came from."""
    if shape_name is not None:
        policy = critic = ModelShape.named(shape_name)
        source = shape_name
    else:
        policy = critic = ModelShape.from_dir(cfg.model.path)
        source = f"{cfg.model.path}/config.json"
        if cfg.use_critic and cfg.critic.model.path != cfg.model.path:
            critic = ModelShape.from_dir(cfg.critic.model.path, "critic.model.path")
    if layers is not None:
        policy, critic = policy.with_layers(layers), critic.with_layers(layers)
        source += f" with {layers} layers"
    judge = None
    if cfg.reward.judge.model.path:  # its own checkpoint, whatever shape the policy is planned at
        judge = ModelShape.from_dir(cfg.reward.judge.model.path, "reward.judge.model.path")
    inputs = PlanInputs(cfg, policy, critic, round(gpu_gib * GIB), round(host_gib * GIB), judge=judge)
    _check_layout_splits_shape(inputs, source)
    return inputs, source


def _check_layout_splits_shape(inputs: PlanInputs, source: str) -> None:
    """What the recipe's validation checks against model.path's config.json, checked against the planned shape
    (a --shape or --layers the recipe's validation did not see)."""
    cfg, problems = inputs.cfg, []
    roles = [("actor", inputs.policy)] + ([("critic", inputs.critic)] if cfg.use_critic else [])
    for role, shape in roles:
        mesh = inputs.mesh(role)
        problem = heads_split_problem(mesh.tp, shape.kv_heads, shape.heads)
        if problem:
            problems.append(f"{role}.megatron.tensor_model_parallel_size={mesh.tp} {problem} ({source})")
        if shape.layers % mesh.pp:
            problems.append(f"{role}.megatron.pipeline_model_parallel_size={mesh.pp} must divide the model's "
                            f"{shape.layers} layers ({source})")
    rollout_tp = cfg.rollout.tensor_model_parallel_size
    problem = heads_split_problem(rollout_tp, inputs.policy.kv_heads, inputs.policy.heads)
    if problem:
        problems.append(f"rollout.tensor_model_parallel_size={rollout_tp} {problem} ({source})")
    if problems:
        raise ConfigError(problems)
