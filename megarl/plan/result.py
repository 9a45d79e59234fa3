"""What a memory plan predicts, as typed values that the `megarl plan` table, the launch check and tests read."""

from __future__ import annotations

from dataclasses import dataclass

Parts = tuple[tuple[str, int], ...]  # (what holds the memory, bytes), in the order they were added


class _Summed:
    parts: Parts

    @property
    def total(self) -> int:
        return sum(size for _, size in self.parts)

    def part(self, name: str) -> int:
        """The bytes held by `name` (0 when nothing is)."""
        return sum(size for part, size in self.parts if part == name)


@dataclass(frozen=True)
class PhaseEstimate(_Summed):
    """One phase's peak on the fullest GPU of a pool (device-wide: every process on the GPU)."""

    name: str  # a phase of phases.STEP_ORDER (perf.py's memory names)
    pool: str  # trainer | critic | rollout | judge (a role's own GPUs, with its enable_resource_pool)
    parts: Parts
    limit: int  # the GPU's memory, bytes
    note: str = ""  # what else the table says about the phase, e.g. the KV cache's capacity
    problem: str | None = None  # why the phase cannot run even though its bytes may fit

    @property
    def fits(self) -> bool:
        return self.total <= self.limit and self.problem is None

    def tight(self, shortfall: float) -> bool:
        """An update that fits, but by less than `shortfall` of its GPU's memory: the plan's error in an update
        (calibration.update_shortfall) could fill it. Only updates: the other phases' plans measured within 3 %."""
        return self.name.startswith("update") and self.fits and self.total > (1 - shortfall) * self.limit


@dataclass(frozen=True)
class HostEstimate(_Summed):
    """One node's host memory while the run trains (the first node of a pool: it also hosts the driver)."""

    pool: str
    parts: Parts
    limit: int  # the node's memory, bytes

    @property
    def fits(self) -> bool:
        return self.total <= self.limit


@dataclass(frozen=True)
class MemoryPlan:
    phases: tuple[PhaseEstimate, ...]  # in step order
    hosts: tuple[HostEstimate, ...]
    kv_cache_tokens: int  # the engine's KV cache capacity per engine (every engine rank holds the same tokens)

    @property
    def fits(self) -> bool:
        return all(p.fits for p in self.phases) and all(h.fits for h in self.hosts)

    @property
    def failing(self) -> tuple[PhaseEstimate | HostEstimate, ...]:
        return tuple(e for e in (*self.phases, *self.hosts) if not e.fits)

    def tight(self, shortfall: float) -> tuple[PhaseEstimate, ...]:
        """The phases that are `PhaseEstimate.tight`."""
        return tuple(p for p in self.phases if p.tight(shortfall))

    def phase(self, name: str, pool: str = "trainer") -> PhaseEstimate:
        return next(p for p in self.phases if p.name == name and p.pool == pool)
