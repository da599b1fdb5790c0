"""Where the tuner starts a map whose calls are short and hold the GIL (issue 42).

A cheap map's executor choice measured 1.79-1.86 calls at once of 2 on a busy machine: below
the overlap the tuner trusts a measurement's shares at (``RELIABLE_CONCURRENCY``), the stage
ran its first 0.8 s on threads before a trim. Calls measured short that hold the GIL start on
one worker's trial whatever their overlap; long calls (images) still need the overlap.
"""

from __future__ import annotations

import pytest

from feedline.autotune import tuner as tuner_module
from feedline.autotune.rules import TRIAL_TICKS
from feedline.autotune.tuner import CallMeasurement, Tuner, TuningCounters

pytestmark = pytest.mark.timeout(60)


class _Stage:
    """A tuned stage whose counters the test advances one period at a time."""

    def __init__(self, measured: CallMeasurement) -> None:
        self.name = "map(f)"
        self.max_workers = self.cpu_workers = 4
        self.cores = 2
        self.ram_budget = 1 << 40
        self.bytes_per_worker = 65536.0
        self.tuned_workers = 2
        self.tuning_done = self.tuning_paused = False
        self.measured_calls = measured
        self.counters = TuningCounters()

    def tuning_counters(self) -> tuple[int, int, int, float, float, float]:
        c = self.counters
        return c.elements, c.calls, c.waits, c.busy, c.input, c.cpu

    def advance(self, elements: int, occupied: float) -> None:
        self.counters.elements += elements
        self.counters.calls += elements
        self.counters.busy += occupied
        self.counters.cpu += occupied


@pytest.fixture
def tuned(monkeypatch):
    """A tuner (its thread never ticks: the test does) on a clock of one second a tick."""
    now = [100.0]
    monkeypatch.setattr(tuner_module.time, "perf_counter", lambda: now[0])
    tuners: list[Tuner] = []

    def make(stage: _Stage):
        tuner = Tuner(period=3600)
        stage.counters = tuner.register(stage)
        tuners.append(tuner)

        def tick(elements: int, occupied: float) -> None:
            now[0] += 1.0
            stage.advance(elements, occupied)
            tuner.tick()
        return tuner, tick

    yield make
    for tuner in tuners:
        tuner.stop()


def _short(concurrency: float, seconds_per_call: float | None = 6e-7) -> CallMeasurement:
    return CallMeasurement(gil_share=1.0, busy_together=0.08, concurrency=concurrency,
                           busy_alone=1.0, rate=290_000.0, seconds_per_call=seconds_per_call)


@pytest.mark.parametrize("concurrency", [1.79, 1.2, 2.0])
def test_short_calls_that_hold_the_gil_start_on_one_workers_trial(tuned, concurrency):
    stage = _Stage(_short(concurrency))
    tuner, tick = tuned(stage)
    tick(60_000, 0.1)
    assert stage.tuned_workers == 1
    decision = tuner.decisions()[-1]
    assert (decision.old, decision.new) == (2, 1)
    assert decision.figures["concurrency"] == concurrency
    # On trial: one worker slower than the threads took (60k/s) goes back to threads.
    for _ in range(TRIAL_TICKS):
        tick(30_000, 1.0)
    assert stage.tuned_workers > 1


@pytest.mark.parametrize("measured", [
    _short(1.79, seconds_per_call=None),  # unmeasured call time: the overlap is needed
    _short(1.65, seconds_per_call=3e-3),  # long calls (images' first calls in a process)
])
def test_other_calls_measured_with_too_little_overlap_keep_their_workers(tuned, measured):
    stage = _Stage(measured)
    tuner, tick = tuned(stage)
    tick(1000, 1.9)
    assert stage.tuned_workers == 2 and tuner.decisions() == ()
