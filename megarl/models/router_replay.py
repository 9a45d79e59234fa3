"""Router replay (R3, `actor.router_replay.mode`): the actor's mixture-of-experts routers route each token to the
experts the rollout engine chose for it, through megatron's own mechanism (a model built with
`TransformerConfig.moe_enable_routing_replay` gives each TopKRouter a `RouterReplay`, which megatron's top-k routing
consults). megatron's static setters act on every router of the process (its class-level list holds the reference's
too, and every model a test builds), so a pass sets and clears the routers of its own model only.

The engine's routing of a sample covers the tokens it forwarded: all but the last ([L − 1, MoE layers, top-k], the
model's MoE layers first to last). `packed_routing` lays it out as the packed micro-batch the model sees (a context
parallel rank's chunks of each sample, as its tokens), with a filler for the rest; a pipeline stage's routers take
their own layers' columns."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.transformer.moe.router import TopKRouter
from megatron.core.transformer.moe.router_replay import RouterReplayAction
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.utils import get_model_config


def packed_routing(routing: torch.Tensor | None, length: int, padded: int, top_k: int | None = None) -> torch.Tensor:
    """One sample's routing over its `padded` tokens (its `length` real ones first). The engine never forwarded the
    last token, and padding is no token: they get experts 0..k−1, a valid choice whose outputs feed no log-prob (the
    last token's output would predict past the sample; padding's are masked) and no other token (causal attention
    within the sample, no expert capacity to compete for)."""
    if routing is None:
        raise ValueError("a sample of the micro-batch has no routed experts")
    if routing.shape[0] != length - 1:
        raise ValueError(f"the engine routed {routing.shape[0]} tokens of a sample of {length}: router replay needs "
                         f"its {length - 1} forwarded tokens (prompt + response − 1)")
    k = routing.shape[-1] if top_k is None else top_k
    out = torch.arange(k, dtype=torch.long).expand(padded, routing.shape[1], k).clone()
    out[: length - 1] = routing
    return out


def moe_routers(chunks: Sequence[torch.nn.Module]) -> list[TopKRouter]:
    """The chunks' MoE routers in layer order (the engine's routing is per layer, first to last)."""
    routers = [module for chunk in chunks for module in chunk.modules() if isinstance(module, TopKRouter)]
    if any(router.router_replay is None for router in routers):
        raise RuntimeError("router replay needs a model built with moe_enable_routing_replay (build_actor's "
                           "router_replay)")
    return sorted(routers, key=lambda router: router.layer_number)


def moe_layer_numbers(config: TransformerConfig) -> list[int]:
    """The model's MoE layers (megatron's 1-based layer numbers, over every pipeline stage), read from
    `moe_layer_freq` as megatron's layer specs read it: an expert layer every N layers, or a 0/1 list per layer."""
    freq = config.moe_layer_freq
    pattern = [int(i % freq == 0) for i in range(config.num_layers)] if isinstance(freq, int) else list(freq)
    return [number for number, is_moe in enumerate(pattern, start=1) if is_moe]


class _ReplayInBackward(torch.autograd.Function):
    """Identity on a micro-batch's output whose backward, which runs before any layer's, switches the routers to
    REPLAY_BACKWARD: a layer that activation recompute runs again then takes the routing its forward took (megatron
    queues each micro-batch's target as it is set and pops one per recomputed router call)."""

    @staticmethod
    def forward(ctx, output: torch.Tensor, replay: RoutingReplay) -> torch.Tensor:
        ctx.replay = replay
        return output.view_as(output)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        ctx.replay.set_action(RouterReplayAction.REPLAY_BACKWARD)
        return grad, None


class RoutingReplay:
    """One pass of a model replaying the engine's routing, micro-batch by micro-batch; a context that leaves the
    model's routers as it found them. `measure_flips` (a forward-only pass): each micro-batch's `flips` count, per
    token, the layers whose router would itself pick other experts than the replayed ones."""

    def __init__(self, chunks: Sequence[torch.nn.Module], measure_flips: bool = False):
        self.routers = moe_routers(chunks)
        moe_layers = moe_layer_numbers(get_model_config(chunks[0]))
        self.columns = [moe_layers.index(router.layer_number) for router in self.routers]  # this stage's layers
        self.moe_layers = len(moe_layers)
        self.flips: torch.Tensor | None = None
        self.batch_flips: list[torch.Tensor] = []  # this stage's `flips` of each micro-batch of the pass
        self.hooks = [router.register_forward_hook(self._count_flips) for router in self.routers] \
            if measure_flips else []

    def __enter__(self) -> RoutingReplay:
        return self

    def __exit__(self, *exc) -> None:
        for router in self.routers:
            router.router_replay.clear_indices()
            router.router_replay.clear_router_replay_action()
        for hook in self.hooks:
            hook.remove()

    def start(self, routing: torch.Tensor | None) -> None:
        """Before a micro-batch's forward: `routing` [tokens, MoE layers, top-k] as the model sees its tokens, or None
        (a micro-batch without engine routing, e.g. PPO-ptx's: the routers choose)."""
        if routing is None:
            self.set_action(None)
            return
        if routing.shape[1] != self.moe_layers:
            raise ValueError(f"the engine's routing has {routing.shape[1]} MoE layers, the model {self.moe_layers}")
        for column, router in zip(self.columns, self.routers):
            router.router_replay.set_target_indices(routing[:, column].contiguous())
        self.set_action(RouterReplayAction.REPLAY_FORWARD)
        if self.hooks:
            self.flips = torch.zeros(routing.shape[0], device=routing.device)
            self.batch_flips.append(self.flips)

    def flips_over_stages(self) -> list[torch.Tensor]:
        """Each micro-batch's `flips` over the whole model: every pipeline stage counted its own layers."""
        if parallel_state.get_pipeline_model_parallel_world_size() > 1:
            group = parallel_state.get_pipeline_model_parallel_group()
            for flips in self.batch_flips:
                dist.all_reduce(flips, group=group)
        return self.batch_flips

    def in_backward(self, output: torch.Tensor) -> torch.Tensor:
        """`output`, through which the micro-batch's backward switches the routers to REPLAY_BACKWARD."""
        return _ReplayInBackward.apply(output, self)

    def set_action(self, action: RouterReplayAction | None) -> None:
        for router in self.routers:
            if action is None:
                router.router_replay.clear_router_replay_action()
            else:
                router.router_replay.set_router_replay_action(action)

    def _count_flips(self, router: TopKRouter, args: tuple, output) -> None:
        """The router's own top-k (its gate's logits: the softmax keeps their order) against the replayed one."""
        target = router.router_replay.target_topk_idx
        if self.flips is None or target is None:
            return
        with torch.no_grad():
            logits = router.gating(args[0]).view(-1, router.config.num_moe_experts)
            own = logits.topk(target.shape[-1], dim=-1).indices.sort(-1).values
            self.flips += (own != target.to(own.device).sort(-1).values).any(-1)
