"""`spawn_roles`: each role of a recipe on its pool, built from its typed inputs, and how the actor's weights reach the
engines, chosen once from where the engines run."""

from __future__ import annotations

from typing import TypeVar

from megarl.config.schema import MegaRLConfig
from megarl.placement import MAIN_POOL, ROLLOUT_POOL, role_pools
from megarl.trainer.recovery import RecoveringRollout
from megarl.trainer.roles import Reference, Roles, Rollout, WeightSync
from megarl.trainer.scaffold import tell
from megarl.trainer.weight_sync import BridgeSync, ColocatedSync
from megarl.workers.actor import ActorWorker
from megarl.workers.critic import CriticWorker
from megarl.workers.groups import (ActorGroup, CriticGroup, JudgeGroup, PooledRolloutGroup, ReferenceGroup,
                                   RewardModelGroup, WeightSenderGroup)
from megarl.workers.inputs import RolloutInputs, model_path, role_inputs
from megarl.workers.judge import JudgeWorker
from megarl.workers.reference import ReferenceWorker
from megarl.workers.reward_model import RewardModelWorker
from megarl.workers.rollout import ColocatedRolloutWorker, PooledRolloutWorker
from megarl.workers.weight_sender import WeightSenderWorker
from parallel.controller import Cluster, RoleHandle
from parallel.worker import Worker

W = TypeVar("W", bound=Worker)


def spawn_roles(cluster: Cluster, cfg: MegaRLConfig, steps: int) -> Roles:
    """Each role on its pool, built from its typed inputs; the roles in the actor's processes get it as their peer
    (they share its GPUs' cached blocks; the rollout role streams its weights), the rollout role last."""
    inputs, pools = role_inputs(cfg, steps), role_pools(cfg)
    actor = ActorGroup(cluster[MAIN_POOL].spawn("actor", ActorWorker, inputs.actor))

    def spawn(name: str, cls: type[W], role_input: object) -> RoleHandle[W]:
        beside = (actor.handle,) if pools[name] == MAIN_POOL else ()
        return cluster[pools[name]].spawn(name, cls, role_input, *beside)

    # A LoRA actor is its own reference (adapters disabled): no second copy of the weights.
    reference: Reference | None = actor if inputs.actor.reference_log_prob is not None else None
    if inputs.reference is not None:
        reference = ReferenceGroup(spawn("reference", ReferenceWorker, inputs.reference))
    critic = CriticGroup(spawn("critic", CriticWorker, inputs.critic)) if inputs.critic is not None else None
    reward_model = None
    if inputs.reward_model is not None:
        reward_model = RewardModelGroup(spawn("reward_model", RewardModelWorker, inputs.reward_model))
        if inputs.reward_model.retemplate is not None:
            tell("reward model: it reads text differently from the policy (tokenizer or chat template), so each "
                 "prompt + response is decoded and encoded again for it")
    # The judge's engine serves a checkpoint of its own: no weights of the actor's to stream, so no peer.
    judge = (JudgeGroup(cluster[pools["judge"]].spawn("judge", JudgeWorker, inputs.judge))
             if inputs.judge is not None else None)
    rollout, weights = place_rollout(cluster, cfg, inputs.rollout, actor, judge if cfg.judge_streams else None)
    # One role per pool of processes, as the pools were chosen from the recipe.
    own = {name: pools.get(name, MAIN_POOL) != MAIN_POOL for name in ("critic", "reward_model")}
    trained = (actor.handle, *((critic.handle,) if critic is not None and own["critic"] else ()))
    scoring = (reward_model.handle,) if reward_model is not None and own["reward_model"] else ()
    return Roles(actor, rollout, weights, critic, reference, reward_model, judge, trained_pools=trained,
                 model_pools=(*trained, *scoring))


def place_rollout(cluster: Cluster, cfg: MegaRLConfig, inputs: RolloutInputs, actor: ActorGroup,
                  judge: JudgeGroup | None = None) -> tuple[Rollout, WeightSync]:
    """The rollout role beside the actor, its engines restarted when one dies and synced through the reshard layer
    (with `judge`, the judge beside it judges each response as it finishes); or on GPUs of its own
    (`rollout.enable_resource_pool`), synced over the bridge."""
    if not inputs.own_pool:
        peers = (actor.handle,) if judge is None else (actor.handle, judge.handle)
        colocated = RecoveringRollout(cluster[MAIN_POOL].spawn("rollout", ColocatedRolloutWorker, inputs, *peers),
                                      tell)
        return colocated, ColocatedSync(colocated)
    pooled = PooledRolloutGroup(cluster[ROLLOUT_POOL].spawn("rollout", PooledRolloutWorker, inputs))
    return pooled, BridgeSync(pooled, join_bridge(cluster, cfg, pooled, actor))


def join_bridge(cluster: Cluster, cfg: MegaRLConfig, rollout: PooledRolloutGroup,
                actor: ActorGroup) -> WeightSenderGroup:
    """The weight bridge from the actor's first rank to every rank of the rollout pool (parallel/weight_bridge.py)."""
    sender = WeightSenderGroup(cluster[MAIN_POOL].spawn("weight_sender", WeightSenderWorker,
                                                        model_path(cfg.model.path, "model.path"),
                                                        cfg.actor.megatron.tensor_model_parallel_size, actor.handle))
    host, port = sender.bridge_address()
    size, timeout = 1 + cluster[ROLLOUT_POOL].world_size, cfg.trainer.collective_timeout_s
    # Both ends at once, the rollout's first: each waits for the other in the rendezvous.
    ends = [rollout.join_bridge_async(host, port, size, timeout), sender.join_bridge_async(host, port, size, timeout)]
    for end in ends:
        end.result()
    return sender
