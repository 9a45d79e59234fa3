"""Which GPUs each role runs on, from the recipe: the actor, its rollout engine and the reference share the main
pool (`trainer.nnodes` × `trainer.n_gpus_per_node`, one process per GPU hosting them all); the critic, the reward
model, the judge and the rollout engines share those processes too, or each gets a pool of its own
(`critic.enable_resource_pool`, `reward.model.enable_resource_pool`, `reward.judge.enable_resource_pool`,
`rollout.enable_resource_pool`)."""

from __future__ import annotations

from megarl.config.schema import MegaRLConfig, RunConfig
from parallel.controller import Cluster, PoolSpec
from parallel.launcher import resolve_launcher, start_cluster

MAIN_POOL = "main"
CRITIC_POOL = "critic"
REWARD_MODEL_POOL = "reward_model"
JUDGE_POOL = "judge"
ROLLOUT_POOL = "rollout"


def main_pool(run: RunConfig) -> PoolSpec:
    """The run's `trainer.nnodes` × `trainer.n_gpus_per_node` GPUs, one worker process each (RL and SFT alike)."""
    return PoolSpec(MAIN_POOL, (run.n_gpus_per_node,) * run.nnodes)


def resource_pools(cfg: MegaRLConfig) -> list[PoolSpec]:
    pools = [main_pool(cfg.trainer)]
    if cfg.use_critic and cfg.critic.enable_resource_pool:
        pools.append(PoolSpec(CRITIC_POOL, (cfg.critic.n_gpus_per_node,) * cfg.critic.nnodes))
    reward_model = cfg.reward.model
    if reward_model.path and reward_model.enable_resource_pool:
        pools.append(PoolSpec(REWARD_MODEL_POOL, (reward_model.n_gpus_per_node,) * reward_model.nnodes))
    judge = cfg.reward.judge
    if judge.model.path and judge.enable_resource_pool:
        pools.append(PoolSpec(JUDGE_POOL, (judge.n_gpus_per_node,) * judge.nnodes))
    if cfg.rollout.enable_resource_pool:
        pools.append(PoolSpec(ROLLOUT_POOL, (cfg.rollout.n_gpus_per_node,) * cfg.rollout.nnodes))
    return pools


def role_pools(cfg: MegaRLConfig) -> dict[str, str]:
    """Role name → pool name, for the roles this recipe runs."""
    roles = {"actor": MAIN_POOL, "rollout": ROLLOUT_POOL if cfg.rollout.enable_resource_pool else MAIN_POOL}
    if cfg.reference_model:
        roles["reference"] = MAIN_POOL
    if cfg.reward.model.path:
        roles["reward_model"] = REWARD_MODEL_POOL if cfg.reward.model.enable_resource_pool else MAIN_POOL
    if cfg.reward.judge.model.path:
        roles["judge"] = JUDGE_POOL if cfg.reward.judge.enable_resource_pool else MAIN_POOL
    if cfg.use_critic:
        roles["critic"] = CRITIC_POOL if cfg.critic.enable_resource_pool else MAIN_POOL
    return roles


def start_workers(cfg: MegaRLConfig) -> Cluster:
    return start_cluster(resource_pools(cfg), cfg.trainer.launcher, cfg.trainer.collective_timeout_s)


def describe_placement(cfg: MegaRLConfig) -> str:
    """One line per pool: its GPUs and the roles it hosts, and the launcher this process would use."""
    roles = role_pools(cfg)
    lines = [f"launcher: {resolve_launcher(cfg.trainer.launcher)} (trainer.launcher={cfg.trainer.launcher})"]
    for pool in resource_pools(cfg):
        nodes = len(pool.gpus_per_node)
        hosted = ", ".join(role for role, name in roles.items() if name == pool.name)
        lines.append(f"pool {pool.name}: {nodes} node{'s' * (nodes > 1)} × {pool.gpus_per_node[0]} GPUs, "
                     f"one process per GPU hosting {hosted}")
    return "\n".join(lines)
