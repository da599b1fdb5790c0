"""The tuner's memory of each stage, and the small helpers its rules share."""

from __future__ import annotations

import collections
import math
import time
import weakref
from dataclasses import dataclass
from typing import Protocol

from feedline.autotune.rules import EXPLORE_TICKS, FINE_STEP, PAUSE_TICKS, PEAK_TICKS, WINDOW_TICKS
from feedline.autotune.stage import Look, TunableStage, TuningCounters
from feedline.profiling.model import StageWindow


class Control:
    """The tuner's memory of one stage: kept across the stage's iterators (each epoch of a
    ``repeat`` builds a new one), which start at the setting the last one had."""

    def __init__(self, stage: TunableStage) -> None:
        self.stage = weakref.ref(stage)
        self.name = stage.name
        self.last: Look | None = None
        self.trial: tuple[str, int, float, int] | None = None  # kind, previous, rate, due
        self.paused_until = 0
        self.explore_at = 0
        # Busy workers its consumer rarely waits for are first tried one fewer after
        # EXPLORE_TICKS looks, as later (the tuner's look count when it registered is
        # added): the setting it starts from is measured (its executor choice), and a try
        # costs a second at the slower setting (chess: a try at 2.2 s, 20% slower, cost a
        # 3 s run 7%). A stage its input holds back tries at once.
        self.first_explore = EXPLORE_TICKS
        self.explore_every = EXPLORE_TICKS  # looks between tries of one worker fewer
        self.grow_pause = PAUSE_TICKS  # looks without a grow after one that did not help
        self.measurement_used = False  # whether its executor choice's figures were used
        # Growing by steps of ``factor`` times the workers (an ascent), or by FINE_STEP.
        self.ascending = True
        self.factor = 2
        self.share: float | None = None  # its calls' CPU share, as last measured
        # Trying fewer workers while as fast (after more did not help).
        self.descending = False
        # Workers its tasks kept busy, at each of the last PEAK_TICKS looks.
        self.peaks: collections.deque[float] = collections.deque(maxlen=PEAK_TICKS)
        # Looks since the setting began, the last WINDOW_TICKS of them.
        self.history: collections.deque[Look] = collections.deque(maxlen=WINDOW_TICKS)
        self.setting = stage.tuned_workers
        self.counters = TuningCounters()
        self.registered = 0  # its place in the order the stages registered
        # When it registered, and the elements it had handed out then: the rate its
        # consumer saw while its executor choice measured its calls.
        self.since = (time.perf_counter(), stage.tuning_counters()[0])


@dataclass(frozen=True)
class Grow:
    """A grow a stage's rule calls for at one look: made only if the stage is the most
    loaded of those whose grow rule fired at that look."""

    control: Control
    stage: TunableStage
    window: StageWindow
    workers: int
    trial: tuple[str, int, float, int]  # kind, previous, rate, due
    reason: str
    figures: dict[str, float]


def rate_since(control: Control, stage: TunableStage) -> float:
    """Elements per second the stage handed out since it registered (infinite before any:
    nothing measured)."""
    started, elements = control.since
    handed_out = stage.tuning_counters()[0] - elements
    seconds = time.perf_counter() - started
    return handed_out / seconds if handed_out > 0 and seconds > 0 else math.inf


def workers_text(count: int) -> str:
    return "one worker" if count == 1 else f"{count} workers"


def fine_step(workers: int) -> int:
    """A step out of the ascent: an eighth of the workers, at least one."""
    return max(1, workers // FINE_STEP)


class Deciding(Protocol):
    """What the tuner's rules, wherever they are written, use of the tuner: its look count,
    and its way to set a stage (recorded with the reason and the figures behind it)."""

    _ticks: int

    def _set(self, stage: TunableStage, control: Control, workers: int, reason: str,
             figures: dict[str, float]) -> None: ...

    def _note(self, control: Control, reason: str, figures: dict[str, float]) -> None: ...
