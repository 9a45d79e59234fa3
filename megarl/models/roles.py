"""The RL roles on megatron-core: actor (LM head, trained), critic (same trunk, scalar value head, trained)
and reference (frozen actor weights).

Each role's weights are on the GPU during its own calls (`weights_in_use`); between them they stay or leave as the
role's `megatron.param_offload` / `grad_offload` say (parallel/offload.py). The reference leaves by default
(`ref.megatron.param_offload`): it is used once per step, so a host→device copy there is cheaper than a second full
copy of the weights held in GPU memory while generation and training run. Where memory is plentiful, resident
weights save that copy in each of its passes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterator

import torch
from mbridge.utils.post_creation_callbacks import make_value_model
from megatron.core import parallel_state
from megatron.core.distributed import finalize_model_grads
from megatron.core.utils import get_model_config, unwrap_model

from megarl.config.schema import LoRAConfig, MegatronConfig, OptimConfig
from megarl.models.bridge import (
    VALUE_HEAD_NAME,
    export_hf_weights,
    make_bridge,
    read_hf_tensors,
)
from megarl.models.hf_names import expert_number, expert_numbered_globally, is_expert
from megarl.models.forward import CachedBlocks, compute_logprobs, compute_sequence_scores, compute_values
from megarl.models.packing import pipeline_needs_one_length
from megarl.models.lora import adapter_layers, adapters_disabled, freeze_base, init_adapters, is_adapter
from megarl.models.training import build_optimizer, train_step
from parallel.engines import EngineExperts, EngineSlot
from parallel.offload import FrozenState, Residency, TrainedState
from parallel.reshard import Convert, WeightStreamer


@dataclass
class RoleModel:
    name: str  # actor | critic | reference
    bridge: object
    chunks: list  # megatron model chunks (DDP-wrapped when trained)
    state: TrainedState | FrozenState  # where the weights (and gradient buffers) live between calls
    optimizer: object = None
    scheduler: object = None
    blocks: CachedBlocks = field(default_factory=CachedBlocks)  # its process's: shared by the roles placed there

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")

    @property
    def packs_to_one_length(self) -> bool:
        """Whether every micro-batch of one pass must hold as many tokens (packing.pipeline_needs_one_length)."""
        return pipeline_needs_one_length(self.chunks)

    def weights_in_use(self):
        """A context in which the weights are on the GPU (for a caller reading `named_parameters` or a checkpoint)."""
        return self.state.weights_in_use()

    def logprobs(self, sequences, micro_batches, temperature=1.0, with_entropy=False, routing=None):
        """`routing`: each sample's routed experts for the routers to replay (an actor built with router_replay)."""
        with self.weights_in_use():
            return compute_logprobs(self.chunks, sequences, micro_batches, self.blocks, temperature, with_entropy,
                                    device=self.device, routing=routing)

    def base_logprobs(self, sequences, micro_batches, temperature=1.0):
        """Log-probs under the model without its LoRA adapters: a LoRA actor's reference policy."""
        with adapters_disabled(self.chunks):
            return self.logprobs(sequences, micro_batches, temperature)

    def values(self, sequences, micro_batches):
        with self.weights_in_use():
            return compute_values(self.chunks, sequences, micro_batches, self.blocks, device=self.device)

    def sequence_scores(self, sequences, micro_batches) -> torch.Tensor:
        with self.weights_in_use():
            return compute_sequence_scores(self.chunks, sequences, micro_batches, self.blocks, device=self.device)

    def updating(self):
        """The role's weights and gradient buffers on the GPU through an update of several optimizer steps: the
        steps inside move nothing, and the offloads and the update's cached blocks go once, after the last."""
        return self.state.update_in_use()

    def train_step(self, batches, loss_fn) -> dict:
        if self.optimizer is None:
            raise RuntimeError(f"the {self.name} is not trained")
        with self.state.update_in_use():
            return train_step(self.chunks, self.optimizer, self.scheduler, batches, loss_fn, self.blocks)

    def named_parameters(self) -> Iterator[tuple[str, torch.Tensor]]:
        """This rank's parameters (detached), named as megatron names them but with global layer numbers (megatron
        numbers a pipeline stage's layers from 0): the names `megarl.models.to_hf.megatron_to_hf` converts. A LoRA
        layer's weight comes merged with its adapter (made as it is reached); the adapters themselves are left out."""
        for chunk in self.chunks:
            module = unwrap_model(chunk)
            merged = {f"{name}.weight": layer for name, layer in adapter_layers(module)}
            for name, param in module.named_parameters():
                if is_adapter(name):
                    continue
                tensor = merged[name].merged_weight() if name in merged else param.detach()
                yield global_name(module, name), tensor

    def named_adapters(self) -> Iterator[tuple[str, object]]:
        return named_adapters(self.chunks)

    def weight_streamer(self, convert: Convert, slot: EngineSlot, slots: list[EngineSlot],
                        engine_experts: EngineExperts = EngineExperts()) -> WeightStreamer:
        """Streams this model's weights (`named_parameters`) into engine `slot` (whose ranks hold `engine_experts`),
        over its pipeline stages and its expert-parallel ranks (parallel/reshard.py)."""
        return WeightStreamer(self.named_parameters, convert, slot, slots,
                              pp_group=parallel_state.get_pipeline_model_parallel_group(),
                              ep_group=parallel_state.get_expert_model_parallel_group(), expert_number=expert_number,
                              engine_experts=engine_experts)

    def export_hf(self):
        """Stream (HF name, tensor); every rank of the model-parallel group must iterate it to the end."""
        if self.bridge.adapter is not None:
            raise NotImplementedError("a LoRA model exports merged, at one rank: megarl/models/lora_export.py")
        with self.weights_in_use():
            yield from export_hf_weights(self.bridge, self.chunks)


_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")


def named_adapters(chunks: list) -> Iterator[tuple[str, object]]:
    """This rank's LoRA layers, by their global names (e.g. `decoder.layers.3.self_attention.linear_qkv`)."""
    for chunk in chunks:
        module = unwrap_model(chunk)
        for name, layer in adapter_layers(module):
            yield global_name(module, name), layer


def global_name(module, name: str) -> str:
    """`name` in megatron model chunk `module` with the pipeline stage's layer number made global, and an expert's
    number too (expert parallelism gives each rank num_moe_experts / EP of them)."""
    layers = getattr(getattr(module, "decoder", None), "layers", [])
    name = _LAYER.sub(lambda m: f"decoder.layers.{layers[int(m.group(1))].layer_number - 1}.", name)
    if is_expert(name):
        per_rank = module.config.num_moe_experts // parallel_state.get_expert_model_parallel_world_size()
        name = expert_numbered_globally(name, per_rank * parallel_state.get_expert_model_parallel_rank())
    return name


def router_losses(megatron: MegatronConfig) -> dict:
    """megatron's settings for the router's load-balancing and z losses a recipe asks for (none: a model's routers
    train by the policy's loss alone)."""
    args: dict = {}
    if megatron.moe_aux_loss_coeff:
        args.update(moe_router_load_balancing_type="aux_loss", moe_aux_loss_coeff=megatron.moe_aux_loss_coeff)
    if megatron.moe_z_loss_coeff:
        args["moe_z_loss_coeff"] = megatron.moe_z_loss_coeff
    return args


def _build(hf_path, megatron: MegatronConfig, *, trainable: bool, value_head: bool, bf16: bool,
           load_weights: bool = True, lora: LoRAConfig | None = None, router_replay: bool = False):
    config_args = router_losses(megatron)
    if router_replay:  # each MoE router gets megatron's RouterReplay (megarl/models/router_replay.py)
        config_args["moe_enable_routing_replay"] = True
    if megatron.recompute_granularity is not None:
        config_args["recompute_granularity"] = megatron.recompute_granularity
        if megatron.recompute_granularity == "full":
            config_args.update(recompute_method="uniform", recompute_num_layers=1)
    bridge = make_bridge(hf_path, torch.bfloat16 if bf16 else torch.float32, megatron.transformer_impl,
                         value_head=value_head, lora=lora, **config_args)
    callbacks = [make_value_model] if value_head else []
    if bridge.adapter is not None:
        callbacks.append(freeze_base)  # before DDP wraps the model: the frozen weights get no gradient buffers
    model = bridge.get_model(
        weight_path=str(hf_path) if load_weights else None,
        wrap_with_ddp=trainable,
        ddp_config={"use_distributed_optimizer": True, "grad_reduce_in_fp32": megatron.grad_reduce_in_fp32,
                    "overlap_grad_reduce": False},
        bf16=bf16,
        fp16=False,
        use_cpu_initialization=not torch.cuda.is_available(),
        post_model_creation_callbacks=callbacks,
    )
    if trainable:
        # The schedules reduce gradients over data/context-parallel ranks, and tied embeddings across
        # pipeline stages, only through this hook (Megatron-LM's trainer sets it; mbridge does not).
        get_model_config(model[0]).finalize_model_grads_func = finalize_model_grads
    return bridge, model


def build_actor(hf_path, megatron: MegatronConfig, optim: OptimConfig, total_steps: int, bf16: bool = False,
                load_weights: bool = True, lora: LoRAConfig | None = None, seed: int = 1,
                blocks: CachedBlocks | None = None, router_replay: bool = False) -> RoleModel:
    """The trained policy; `load_weights=False` keeps megatron's random initialisation (only `config.json` is
    read), for benchmarks of shapes whose weights would take long to write and read. With `lora` (a rank > 0) only
    LoRA adapters train, drawn from `seed` the same in every parallel layout. `router_replay`: its MoE routers can
    replay given routing (R3)."""
    bridge, model = _build(hf_path, megatron, trainable=True, value_head=False, bf16=bf16, load_weights=load_weights,
                           lora=lora, router_replay=router_replay)
    if bridge.adapter is not None:  # before the optimizer copies the weights into its fp32 master parameters
        init_adapters(named_adapters(model), seed)
    return _trained("actor", bridge, model, optim, megatron, total_steps, bf16, blocks)


def build_critic(hf_path, megatron: MegatronConfig, optim: OptimConfig, total_steps: int, bf16: bool = False,
                 seed: int = 1, blocks: CachedBlocks | None = None) -> RoleModel:
    """A value model on the trunk of the checkpoint at `hf_path`: its `score.weight` when it has one (a
    critic checkpoint), else a head drawn from `seed` identically on every rank and parallel layout. `blocks`: those
    of the process it shares with other roles (the builders below take it too)."""
    bridge, model = _build(hf_path, megatron, trainable=True, value_head=True, bf16=bf16)
    head = read_hf_tensors(hf_path, [VALUE_HEAD_NAME]).get(VALUE_HEAD_NAME)
    for chunk in model:
        layer = getattr(unwrap_model(chunk), "output_layer", None)
        if layer is None or not getattr(unwrap_model(chunk), "post_process", False):
            continue
        if head is None:
            generator = torch.Generator().manual_seed(seed)
            head = torch.randn(layer.weight.shape, generator=generator) / layer.weight.shape[1] ** 0.5
        with torch.no_grad():
            layer.weight.copy_(head.to(layer.weight.dtype))
    return _trained("critic", bridge, model, optim, megatron, total_steps, bf16, blocks)


def build_frozen(hf_path, megatron: MegatronConfig, bf16: bool = False, value_head: bool = False,
                 lora: LoRAConfig | None = None) -> RoleModel:
    """An untrained model skeleton of the checkpoint's architecture, for loading a megarl checkpoint into; with
    `lora`, the base model's weights from `hf_path` and adapters to load a LoRA checkpoint's into."""
    bridge, model = _build(hf_path, megatron, trainable=False, value_head=value_head, bf16=bf16,
                           load_weights=lora is not None, lora=lora)
    return RoleModel("critic" if value_head else "actor", bridge, model, FrozenState(model, Residency()))


def build_reward_model(hf_path, megatron: MegatronConfig, bf16: bool = False, resident: bool = False,
                       blocks: CachedBlocks | None = None) -> RoleModel:
    """A frozen value-head model with the checkpoint's `score.weight`, kept in host memory between its passes (as
    the reference is) unless `resident` (GPUs of its own)."""
    head = read_hf_tensors(hf_path, [VALUE_HEAD_NAME]).get(VALUE_HEAD_NAME)
    if head is None or head.shape[0] != 1:
        raise ValueError(f"{hf_path} is not a reward model: it needs a {VALUE_HEAD_NAME} of one label (shape "
                         f"[1, hidden]; `megarl rm` writes one), found {None if head is None else tuple(head.shape)}")
    bridge, model = _build(hf_path, megatron, trainable=False, value_head=True, bf16=bf16)
    for chunk in model:
        chunk.requires_grad_(False)
        layer = getattr(unwrap_model(chunk), "output_layer", None)
        if layer is not None and getattr(unwrap_model(chunk), "post_process", False):
            with torch.no_grad():
                layer.weight.copy_(head.to(layer.weight.dtype))
    reward_model = RoleModel("reward_model", bridge, model, FrozenState(model, Residency(params=not resident)),
                             blocks=blocks or CachedBlocks())
    reward_model.state.settle()
    return reward_model


def build_reference(hf_path, megatron: MegatronConfig, bf16: bool = False, param_offload: bool = True,
                    blocks: CachedBlocks | None = None) -> RoleModel:
    """The frozen policy; `param_offload`: its weights in pinned host memory outside its calls."""
    bridge, model = _build(hf_path, megatron, trainable=False, value_head=False, bf16=bf16)
    for chunk in model:
        chunk.requires_grad_(False)
    reference = RoleModel("reference", bridge, model, FrozenState(model, Residency(params=param_offload)),
                          blocks=blocks or CachedBlocks())
    reference.state.settle()
    return reference


def _trained(name: str, bridge, model: list, optim: OptimConfig, megatron: MegatronConfig, total_steps: int,
             bf16: bool, blocks: CachedBlocks | None = None) -> RoleModel:
    """A trained role with its optimizer, its weights and gradient buffers where `megatron`'s offloads put them."""
    optimizer, scheduler = build_optimizer(
        model,
        lr=optim.lr,
        min_lr=optim.min_lr,
        weight_decay=optim.weight_decay,
        betas=tuple(optim.betas),
        clip_grad=optim.clip_grad,
        lr_warmup_steps=optim.lr_warmup_steps,
        lr_decay_style=optim.lr_decay_style,
        total_steps=total_steps,
        bf16=bf16,
        cpu_offload=megatron.optimizer_offload,
    )
    state = TrainedState(model, Residency(params=megatron.param_offload, grads=megatron.grad_offload))
    state.settle()
    return RoleModel(name, bridge, model, state, optimizer, scheduler, blocks or CachedBlocks())

