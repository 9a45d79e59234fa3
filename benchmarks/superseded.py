"""Which measured phases of a memory row still describe the code, and which a later commit changed.

A row's phase is superseded when a commit after the row's (`git merge-base --is-ancestor`) changed what that phase
holds, or how it is measured, for the row's configuration: `CHANGES` names each such commit, its phases and the
configurations it touched. A row whose commit this history does not hold (dfb0091, cfe7ee1: work squashed into
9d20069, the first memory commit) predates every change listed. Commits that changed no measured memory are not listed:
8ac1689 (one residency per update: the 0.5B PPO updates reserved the same before and after it, 40.65 and 38.15 GiB at
ab68815 against 41.57 and 39.09 at 3421a59, the difference the resident reference's 0.92 GiB) and 0f7d2c3 (which
timed the hand-over apart; memory/sync spans the whole hand-over again, megarl/trainer/perf.py).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

from megarl.config import MegaRLConfig

PASSES = ("old_log_prob", "ref", "values", "update_critic", "update_actor")
LOGIT_PASSES = ("old_log_prob", "ref", "update_actor")
EVERY_PHASE = ("gen", *PASSES, "sync")
STEP_ORDER = ("gen", "old_log_prob", "ref", "values", "update_critic", "update_actor", "sync")


@dataclass(frozen=True)
class Change:
    commit: str
    what: str
    phases: Callable[[MegaRLConfig], tuple[str, ...]]  # the phases it changed for a run of this configuration


def _always(phases: tuple[str, ...]) -> Callable[[MegaRLConfig], tuple[str, ...]]:
    return lambda cfg: phases


def _onloads(cfg: MegaRLConfig) -> tuple[str, ...]:
    """The phases at whose start a role's weights or gradient buffers come back to the GPU."""
    actor, critic = cfg.actor.megatron, cfg.critic.megatron
    phases = set()
    if cfg.reference_model and cfg.ref.megatron.param_offload:
        phases.add("ref")
    if actor.param_offload:
        phases |= {"old_log_prob", "update_actor"}
    if actor.grad_offload:
        phases.add("update_actor")
    if cfg.use_critic and critic.param_offload:
        phases |= {"values", "update_critic"}
    if cfg.use_critic and critic.grad_offload:
        phases.add("update_critic")
    return tuple(sorted(phases))


def _after_resident_reference(cfg: MegaRLConfig) -> tuple[str, ...]:
    if not cfg.reference_model or cfg.ref.megatron.param_offload:
        return ()
    runs = [p for p in STEP_ORDER if p != "values" or cfg.use_critic]
    return (runs[runs.index("ref") + 1],)


def _compiled_layers(cfg: MegaRLConfig) -> tuple[str, ...]:
    megatron = cfg.actor.megatron
    one_gpu = megatron.tensor_model_parallel_size == megatron.pipeline_model_parallel_size == 1
    return PASSES if one_gpu and megatron.context_parallel_size == 1 and not cfg.actor.lora.rank else ()


CHANGES = (
    Change("89ba561", "a phase's peak is the largest sample inside it, not one from before its start",
           _always(EVERY_PHASE)),
    Change("79910ec", "the allocator's cache is emptied once per pass, its largest micro-batch first",
           _always(PASSES)),
    Change("436543d", "cached blocks are kept between passes of one model and kind that fit in them",
           _always(PASSES)),
    Change("9b8910f", "an update gives its cached blocks back when it ends",
           lambda cfg: () if cfg.actor.megatron.grad_offload else ("sync",)),
    Change("424e3b3", "the logits stay bf16 (no float32 copy)", _always(LOGIT_PASSES)),
    Change("7c5fdc0", "attention takes the key/value heads unrepeated", _always(PASSES)),
    Change("baa3c62", "each log-prob pass is one fused call with no float32 temporary", _always(LOGIT_PASSES)),
    Change("279d552", "decoder layers run compiled on one GPU's model", _compiled_layers),
    Change("3c047c9", "weights and gradient buffers coming back hand back the cached blocks first", _onloads),
    Change("63a8172", "each call samples as it returns: the sync's peak holds the KV cache's return",
           lambda cfg: () if cfg.rollout.enable_resource_pool else ("sync",)),
    Change("9721eb3", "a resident reference hands its pass's cached blocks back", _after_resident_reference),
)


@lru_cache(maxsize=None)
def measured_before(row_commit: str, change: str, repo: Path) -> bool:
    """Whether a row measured at `row_commit` (its first word) ran without `change`."""
    sha = row_commit.split()[0]
    if sha.startswith(change) or change.startswith(sha):
        return False
    known = subprocess.run(["git", "cat-file", "-e", f"{sha}^{{commit}}"], cwd=repo, capture_output=True)
    if known.returncode != 0:
        return True  # not in this history: squashed before the first change listed
    ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", sha, change], cwd=repo, capture_output=True)
    return ancestor.returncode == 0


def superseded(row: dict, cfg: MegaRLConfig, repo: Path) -> dict[str, list[str]]:
    """Per superseded phase of `row` (run with `cfg`), the commits that changed it since."""
    out: dict[str, list[str]] = {}
    for change in CHANGES:
        if measured_before(row["commit"], change.commit, repo):
            for phase in change.phases(cfg):
                out.setdefault(phase, []).append(change.commit)
    return out
