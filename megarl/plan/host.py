"""Host memory of one node: per GPU a trainer worker process and an SGLang scheduler process (their baselines), the
pinned and offloaded copies the roles keep there (parallel/offload.py, megatron's hybrid optimizer, the reference's
host copy), and on the first node the driver; a judge's scheduler processes. A critic, the rollout engines or the
judge with GPUs of their own get a row of their own (their worker processes, and the engines' scheduler processes)."""

from __future__ import annotations

from megarl.plan.calibration import gib
from megarl.plan.inputs import PlanInputs
from megarl.plan.judge import JUDGE_POOL, JudgeEngine, judge_host
from megarl.plan.result import HostEstimate, Parts
from megarl.plan.state import RoleState


def host_estimates(inputs: PlanInputs, trainer_roles: tuple[RoleState, ...], critic: RoleState | None,
                   colocated_critic: bool, judge: JudgeEngine | None = None) -> tuple[HostEstimate, ...]:
    cal, cfg = inputs.calibration, inputs.cfg
    gpus, own_rollout = cfg.trainer.n_gpus_per_node, cfg.rollout.enable_resource_pool
    engines = () if own_rollout else (("engine processes", gpus * gib(cal.host_engine_gib)),)
    trainer = (("worker processes", gpus * gib(cal.host_worker_gib)), *engines,
               ("driver", gib(cal.host_driver_gib))) + judge_host(inputs, judge) + _copies(trainer_roles, gpus)
    hosts = [HostEstimate("trainer", trainer, inputs.host_bytes)]
    if critic is not None and not colocated_critic:
        critic_gpus = cfg.critic.n_gpus_per_node
        own = (("worker processes", critic_gpus * gib(cal.host_worker_gib)),) + _copies((critic,), critic_gpus)
        hosts.append(HostEstimate("critic", own, inputs.host_bytes))
    if own_rollout:
        rollout_gpus = cfg.rollout.n_gpus_per_node
        hosts.append(HostEstimate("rollout", (("worker processes", rollout_gpus * gib(cal.host_worker_gib)),
                                              ("engine processes", rollout_gpus * gib(cal.host_engine_gib))),
                                  inputs.host_bytes))
    if judge is not None and judge.own_pool:
        judge_gpus = cfg.reward.judge.n_gpus_per_node
        hosts.append(HostEstimate(JUDGE_POOL, (("worker processes", judge_gpus * gib(cal.host_worker_gib)),
                                               ("engine processes", judge_gpus * gib(cal.host_engine_gib))),
                                  inputs.host_bytes))
    return tuple(hosts)


def _copies(roles: tuple[RoleState, ...], gpus: int) -> Parts:
    return tuple((name, gpus * size) for state in roles for name, size in state.host_parts())
