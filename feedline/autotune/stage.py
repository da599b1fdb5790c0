"""What a stage offers the tuner: its counters, its knobs, the measurement of its calls, and
how far it may grow (its bound)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from feedline.autotune.rules import HEADROOM, SHARE_FLOOR
from feedline.execution.map_knobs import CallMeasurement, TuningCounters
from feedline.placement.policy import INLINE_MAX_CALL_SECONDS, holds_the_gil
from feedline.profiling.model import Snapshot

# The stage's own measurements (its knobs hold them, below the tuner) and placement's reading
# of them, under the names the tuner's modules use.
__all__ = ["Bound", "CallMeasurement", "Look", "TunableStage", "TuningCounters", "gil_filling",
           "holds_the_gil", "idle_filling", "short_calls", "stage_bound"]


def gil_filling(stage: TunableStage, holding: float) -> int:
    """Threads whose GIL time fills the GIL, with :data:`HEADROOM`, within the stage's CPU
    workers: ``holding`` is the share of a call's time it holds the GIL. (Past those, calls
    that wait grow by measured steps: a jump to hundreds of threads on two calls' figures
    would be a guess.)"""
    return min(stage.cpu_workers, math.ceil(HEADROOM / max(holding, 1e-3) - 1e-9))


def idle_filling(workers: int, busy: float, idle_cpus: float | None) -> int:
    """Threads that fill the CPUs the machine left idle: ``workers`` plus as many more as
    ``idle_cpus`` holds at ``busy`` CPU each (rounded; unmeasured: no limit).

    Example:
        >>> idle_filling(2, 0.81, 0.15), idle_filling(2, 0.5, 0.9), idle_filling(2, 0.01, 1.9)
        (2, 4, 192)
    """
    if idle_cpus is None:
        return 1 << 30
    return workers + round(max(idle_cpus, 0.0) / max(busy, 1e-2))


@dataclass(frozen=True)
class Bound:
    """How many workers a stage may have now, and why (see the module doc).

    Attributes:
        workers: The bound.
        share: Share of its calls' wall time on a CPU, as last measured (``None``: not yet).
        by_cpu: Workers whose CPU time adds up to the stage's cores.
        by_ram: Workers whose elements in flight and threads fit the RAM budget.
        limit: What holds it: ``"threads"`` (its hard cap), ``"cpu workers"``, ``"cpu"``
            or ``"ram"``.
    """

    workers: int
    share: float | None
    by_cpu: int
    by_ram: int
    limit: str

    def figures(self) -> dict[str, float]:
        """Its numbers, as a :class:`TuningDecision` keeps them.

        Example:
            >>> Bound(8, 0.25, 8, 100, "cpu").figures()
            {'bound': 8.0, 'by_cpu': 8.0, 'by_ram': 100.0, 'cpu_share': 0.25}
        """
        numbers = {"bound": float(self.workers), "by_cpu": float(self.by_cpu),
                   "by_ram": float(self.by_ram)}
        if self.share is not None:
            numbers["cpu_share"] = self.share
        return numbers


def stage_bound(stage: TunableStage, share: float | None) -> Bound:
    """The most workers ``stage`` may have, its calls spending ``share`` of their wall time
    on a CPU (``None``: not measured yet: its CPU workers).

    Example:
        >>> class Stage:
        ...     max_workers, cpu_workers, cores = 256, 4, 2
        ...     ram_budget, bytes_per_worker = 1 << 30, 65536.0
        >>> stage_bound(Stage(), 0.01).workers  # 2 cores / 0.01: 200 threads' CPU fills 2
        200
        >>> stage_bound(Stage(), 0.2)  # doctest: +NORMALIZE_WHITESPACE
        Bound(workers=10, share=0.2, by_cpu=10, by_ram=16384, limit='cpu')
        >>> stage_bound(Stage(), 1.0).workers, stage_bound(Stage(), None).workers
        (4, 4)
    """
    floor, hard = stage.cpu_workers, stage.max_workers
    by_ram = int(stage.ram_budget // max(stage.bytes_per_worker, 1.0))
    if share is None:
        return Bound(min(floor, hard), None, floor, by_ram, "cpu workers")
    by_cpu = math.floor(stage.cores / max(share, SHARE_FLOOR) + 1e-9)
    workers, limit = min((hard, "threads"), (by_cpu, "cpu"), (by_ram, "ram"),
                         key=lambda pair: pair[0])
    if workers <= floor:
        workers, limit = min(floor, hard), "cpu workers" if floor <= hard else "threads"
    return Bound(workers, share, by_cpu, by_ram, limit)


def short_calls(measured: CallMeasurement) -> bool:
    """Whether a call is short enough that a hand-off to a worker thread is much of its
    cost (:data:`~feedline.placement.policy.INLINE_MAX_CALL_SECONDS`; unmeasured counts
    as short).

    Example:
        >>> short_calls(CallMeasurement(1.0, 1.0, 2.0, seconds_per_call=40e-6))
        True
    """
    return measured.seconds_per_call is None or measured.seconds_per_call < INLINE_MAX_CALL_SECONDS


class TunableStage(Protocol):
    """What a stage offers the tuner."""

    name: str

    def tuning_counters(self) -> tuple[int, int, int, float, float, float]:
        """(elements handed out, ``next()`` calls, calls that waited, seconds its tasks
        took, seconds spent pulling its input, CPU seconds of its tasks), over every
        iterator of the stage so far."""

    @property
    def tuned_workers(self) -> int:
        """Workers allowed to run at once now."""

    @tuned_workers.setter
    def tuned_workers(self, value: int) -> None: ...

    @property
    def max_workers(self) -> int:
        """The most threads the stage may have, whatever its calls (its hard cap)."""

    @property
    def cpu_workers(self) -> int:
        """The most workers its CPU budget gives calls that compute."""

    @property
    def cores(self) -> int:
        """CPUs its budget gives it: what its calls' CPU time may add up to."""

    @property
    def ram_budget(self) -> int:
        """Bytes its workers may hold."""

    @property
    def bytes_per_worker(self) -> float:
        """Bytes one more worker holds (its tasks' elements, its thread)."""

    @property
    def tuning_paused(self) -> bool:
        """Whether the stage's figures mean nothing for now (it is measuring something)."""

    @property
    def tuning_done(self) -> bool:
        """Whether the tuner should forget the stage (closed, or moved to processes)."""

    @property
    def measured_calls(self) -> CallMeasurement | None:
        """How its calls ran on threads, as its executor choice measured them (``None``
        when not measured, or when they run in processes)."""


Look = Snapshot
"""(time, elements, calls, waits, busy seconds, input seconds, CPU seconds) at one look: the
snapshot a :class:`~feedline.profiling.model.StageWindow` is measured between."""
