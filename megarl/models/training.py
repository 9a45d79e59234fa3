"""Optimizer, LR schedule and one optimizer step over packed micro-batches (megatron schedules, so
pipeline parallelism and gradient accumulation come for free).

Loss convention: `loss_fn(output, batch)` returns this micro-batch's *contribution* to the global loss
(e.g. `agg_loss` with global token/sequence counts), so contributions summed over micro-batches and ranks
give the loss. megatron's schedule multiplies a returned loss by the CP size and divides it by the number of
micro-batches, and DDP averages gradients over data × context parallel ranks; the step multiplies by
data-parallel size × micro-batch count to undo exactly that.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Callable

import torch
from megatron.core import parallel_state
from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
from megatron.core.optimizer.distrib_optimizer import HAVE_APEX_OR_TE
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
from megarl.models import fallbacks
from megarl.models.forward import CachedBlocks, run_schedule
from megarl.models.packing import PackedBatch
from megarl.models.router_replay import RoutingReplay

LossFn = Callable[[torch.Tensor, PackedBatch], tuple[torch.Tensor, dict[str, torch.Tensor]]]


def build_optimizer(
    model: list,
    *,
    lr: float,
    min_lr: float = 0.0,
    weight_decay: float = 0.01,
    betas: tuple[float, float] = (0.9, 0.999),
    clip_grad: float = 1.0,
    lr_warmup_steps: int = 0,
    lr_decay_style: str = "constant",
    total_steps: int = 1,
    bf16: bool = False,
    cpu_offload: bool = False,
):
    """megatron's distributed Adam(W) over the DDP-wrapped `model` chunks, and its LR/WD scheduler.

    `cpu_offload`: megatron's hybrid optimizer with its whole shard offloaded — fp32 master weights and Adam moments in
    host memory, the step on the CPU (gradients copied out, updated bf16 weights copied in, both overlapped on side
    streams). Precision-aware mode makes the distributed optimizer hand the hybrid one its bf16 shards instead of
    keeping fp32 copies on the GPU. Without CUDA the state is in host memory already and the plain optimizer runs."""
    fallbacks.install()
    offload = cpu_offload and torch.cuda.is_available()
    config = OptimizerConfig(
        optimizer="adam",
        lr=lr,
        min_lr=min_lr,
        weight_decay=weight_decay,
        adam_beta1=betas[0],
        adam_beta2=betas[1],
        clip_grad=clip_grad,
        bf16=bf16,
        params_dtype=torch.bfloat16 if bf16 else torch.float32,
        use_distributed_optimizer=True,
        optimizer_cpu_offload=offload,
        optimizer_offload_fraction=1.0 if offload else 0.0,
        overlap_cpu_optimizer_d2h_h2d=offload,
        store_param_remainders=False,  # a TE FusedAdam feature
    )
    if offload:
        # megatron 0.16.1's OptimizerConfig.__post_init__ asks for TE's version whenever precision-aware mode is on
        # and fails without TE, although the hybrid optimizer needs none: set the mode and what __post_init__ derives
        # from it (with CPU offload) after construction.
        config.use_precision_aware_optimizer = True
        config.use_precision_aware_optimizer_no_fp8_or_ds_fp8 = True
    optimizer = get_megatron_optimizer(config, model)
    allocate_optimizer_state(optimizer)
    scheduler = OptimizerParamScheduler(
        optimizer,
        init_lr=0.0 if lr_warmup_steps else lr,
        max_lr=lr,
        min_lr=min_lr,
        lr_warmup_steps=lr_warmup_steps,
        lr_decay_steps=max(total_steps, lr_warmup_steps + 1),
        lr_decay_style=lr_decay_style,
        start_wd=weight_decay,
        end_wd=weight_decay,
        wd_incr_steps=max(total_steps, 1),
        wd_incr_style="constant",
    )
    return optimizer, scheduler


def allocate_optimizer_state(optimizer) -> None:
    """Adam's moments from the start, zero, instead of in the first step: a colocated engine sizes its KV cache against
    what the trainer holds when the engine starts, so the trainer's footprint must not grow after that. (megatron 0.16
    also reads torch Adam's step count when building the state dict a checkpoint loads into.) The hybrid offload
    optimizer keeps its state in host memory and has no initializer; Apex/TE optimizers keep the step in their
    param groups."""
    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        if len(opt.optimizer.state) == 0 and opt.init_state_fn is not None:
            opt.init_state_fn(opt.optimizer, opt.config)
            if not HAVE_APEX_OR_TE:
                for state in opt.optimizer.state.values():
                    state["step"] = torch.tensor(0.0)


def train_step(model: list, optimizer, scheduler, batches: list[PackedBatch], loss_fn: LossFn,
               blocks: CachedBlocks) -> dict:
    """Forward-backward over `batches`, then one optimizer step. Returns grad_norm, lr and whether the update
    was applied, and the per-micro-batch metrics of `loss_fn` (0-d tensors) summed on the last pipeline stage. The
    sums stay on the device for the caller to move to the host in one copy (`reduce_metrics`): reading one per
    micro-batch would hold the schedule until the GPU had run that micro-batch's forward."""
    scale = parallel_state.get_data_parallel_world_size() * len(batches)
    summed: dict[str, torch.Tensor] = {}

    def loss(output, batch):
        contribution, metrics = loss_fn(output, batch)
        for key, value in metrics.items():
            # float64 from 0.0, in micro-batch order: exactly the sum of the values as Python floats.
            summed[key] = summed.get(key, 0.0) + value.detach().double()
        return contribution * scale, {}

    for chunk in model:
        chunk.train()
        chunk.zero_grad_buffer()
    optimizer.zero_grad()
    replaying = any(batch.routed_experts is not None for batch in batches)  # router replay (R3)
    with RoutingReplay(model) if replaying else nullcontext() as replay:
        run_schedule(model, batches, loss, forward_only=False, blocks=blocks, replay=replay)
    update_successful, grad_norm, _ = optimizer.step()
    if update_successful:
        scheduler.step(increment=1)
    return {
        "grad_norm": float(grad_norm) if grad_norm is not None else float("nan"),
        "lr": optimizer.param_groups[0]["lr"],
        "update_successful": float(bool(update_successful)),
        **summed,
    }
