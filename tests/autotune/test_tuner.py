"""The tuner: its rules on a stage whose counters the test sets, then on real pipelines."""

from __future__ import annotations

import itertools
import logging
import threading
import time

import numpy as np
import pytest
from gil_measurements import measure_as, serialized_short, waiting

import feedline as fl
from feedline.autotune import tuner as tuner_module
from feedline.autotune.stage import short_calls
from feedline.autotune.tuner import (
    ASCENT_TRIAL_TICKS,
    EXPLORE_TICKS,
    PAUSE_TICKS,
    PERIOD,
    TRIAL_TICKS,
    CallMeasurement,
    Tuner,
    TuningCounters,
)
from feedline.testing.threads import no_leaked_threads


class FakeStage:
    """A stage whose counters the test advances, as a map would over one period.

    ``workers`` is its CPU workers (and its cores); ``threads`` (default: as many) the most
    it may have, for calls that wait.
    """

    def __init__(self, name: str = "map(f)", workers: int = 4, threads: int | None = None,
                 cores: int | None = None, ram_budget: int = 1 << 40,
                 bytes_per_worker: float = 65536.0) -> None:
        self.name = name
        self.max_workers = threads or workers
        self.cpu_workers = workers
        self.cores = cores or workers
        self.ram_budget = ram_budget
        self.bytes_per_worker = bytes_per_worker
        self.tuned_workers = workers
        self.tuning_done = False
        self.tuning_paused = False
        self.measured_calls: CallMeasurement | None = None
        self.counters: TuningCounters = TuningCounters()

    def tuning_counters(self) -> tuple[int, int, int, float, float, float]:
        c = self.counters
        return c.elements, c.calls, c.waits, c.busy, c.input, c.cpu

    def advance(self, elements: int, waits: int, occupied: float, seconds: float = 1.0,
                pulling: float = 0.0, cpu_share: float = 1.0) -> None:
        """One period: ``occupied`` workers busy on average, ``pulling`` of it spent
        pulling the input, the calls on a CPU ``cpu_share`` of their time."""
        self.counters.elements += elements
        self.counters.calls += elements
        self.counters.waits += waits
        self.counters.busy += occupied * seconds
        self.counters.cpu += occupied * seconds * cpu_share
        self.counters.input += pulling * seconds


@pytest.fixture
def clock(monkeypatch):
    """The tuner's clock, advanced by the test one period (1 s) per tick."""
    now = [100.0]
    monkeypatch.setattr(tuner_module.time, "perf_counter", lambda: now[0])
    return now


def _tick(tuner: Tuner, clock: list[float], stage: FakeStage, elements: int, waits: int,
          occupied: float, share: float = 1.0) -> None:
    clock[0] += 1.0
    stage.advance(elements, waits, occupied, cpu_share=share)
    tuner.tick()


def _trial(tuner, clock, stage, elements, waits, occupied):
    """The looks a change is judged on (the first after it starts its measurement)."""
    for _ in range(TRIAL_TICKS):
        _tick(tuner, clock, stage, elements, waits, occupied)


@pytest.fixture
def tuner_with():
    """A tuner tuning the given stage; its own thread never ticks (the test does), and it
    is stopped after the test."""
    tuners = []

    def make(stage: FakeStage) -> Tuner:
        tuner = Tuner(period=3600)
        stage.counters = tuner.register(stage)
        tuners.append(tuner)
        return tuner

    yield make
    for tuner in tuners:
        tuner.stop()


def test_idle_workers_are_trimmed_to_those_the_tasks_keep_busy(clock, tuner_with):
    stage = FakeStage(workers=8)
    tuner = tuner_with(stage)
    _tick(tuner, clock, stage, 1000, 900, 1.0)  # first look: only remembered
    assert stage.tuned_workers == 8
    _tick(tuner, clock, stage, 1000, 900, 1.5)
    assert stage.tuned_workers == 2  # ceil(1.5 busy workers * 1.3)
    (decision,) = tuner.decisions()
    assert (decision.stage, decision.setting, decision.old, decision.new) == \
        ("map(f)", "workers", 8, 2)
    assert "kept 1.5 workers busy at 1,000 elements/s: 8 workers were 19% busy" in \
        decision.reason


def test_one_look_of_idle_workers_among_busy_ones_trims_nothing(clock, tuner_with):
    # A hiccup of a shared machine (one look at 0.6 busy workers of 2) is judged with the
    # looks around it (2 s of busy workers): no trim, which would starve the consumer.
    stage = FakeStage(workers=2)
    tuner = tuner_with(stage)
    clock_step = 0.25
    for occupied in (1.9, 1.9, 1.9, 1.9, 0.6):
        clock[0] += clock_step
        stage.advance(250, 240, occupied, seconds=clock_step)
        tuner.tick()
    assert stage.tuned_workers == 2
    assert tuner.decisions() == ()


def test_a_trim_that_starves_the_consumer_and_slows_the_stage_is_undone(clock, tuner_with):
    stage = FakeStage(workers=4)
    tuner = tuner_with(stage)
    _tick(tuner, clock, stage, 1000, 100, 1.0)
    _tick(tuner, clock, stage, 1000, 100, 1.0)
    assert stage.tuned_workers == 2
    _trial(tuner, clock, stage, 700, 600, 1.0)
    assert stage.tuned_workers == 4
    assert "the rate fell (700 vs 1,000 elements/s)" in tuner.decisions()[-1].reason
    for _ in range(PAUSE_TICKS - 1):  # left alone for a while, idle or not
        _tick(tuner, clock, stage, 1000, 100, 1.0)
    assert stage.tuned_workers == 4


def test_busy_workers_with_a_waiting_consumer_grow_while_it_helps(clock, tuner_with):
    stage = FakeStage(workers=16)
    stage.tuned_workers = 2
    tuner = tuner_with(stage)
    _tick(tuner, clock, stage, 1000, 500, 1.9)
    _tick(tuner, clock, stage, 1000, 500, 1.9)
    assert stage.tuned_workers == 4  # an ascent: twice the workers
    for _ in range(ASCENT_TRIAL_TICKS - 1):
        _tick(tuner, clock, stage, 1600, 500, 3.8)
    assert stage.tuned_workers == 4
    # Judged: 1.6x the rate for 2x the workers, by at least half the rise: the ascent goes
    # on at once, at the same factor (not almost linear: not twice as large).
    _tick(tuner, clock, stage, 1600, 500, 3.8)
    assert stage.tuned_workers == 8
    for _ in range(ASCENT_TRIAL_TICKS - 1):
        _tick(tuner, clock, stage, 1800, 500, 7.8)
    assert stage.tuned_workers == 8
    # 1.12x for 2x: kept (faster), but past the knee: steps of an eighth from here, the
    # first at once (still waited on, busy).
    _tick(tuner, clock, stage, 1800, 500, 7.8)
    assert stage.tuned_workers == 9
    _trial(tuner, clock, stage, 1800, 500, 8.8)  # no gain: back to 8, then a pause
    assert stage.tuned_workers == 8
    assert [(d.old, d.new) for d in tuner.decisions()] == [(2, 4), (4, 8), (8, 9), (9, 8)]
    assert "one more worker did not help" in tuner.decisions()[-1].reason
    figures = tuner.decisions()[-1].figures
    assert (figures["rate"], figures["rate_before"]) == (1800, 1800)


def test_a_step_that_scales_linearly_makes_the_next_twice_as_large(clock, tuner_with):
    # Calls that wait, far from any limit: each step doubles the rate with the workers.
    stage = FakeStage(workers=4, threads=256, cores=2)
    tuner = tuner_with(stage)
    # On a CPU 0.5% of their time: 400 threads' CPU would fill 2 cores; 256 at most.
    _tick(tuner, clock, stage, 1000, 900, 4.0, share=0.005)
    _tick(tuner, clock, stage, 1000, 900, 4.0, share=0.005)
    assert stage.tuned_workers == 8
    for _ in range(ASCENT_TRIAL_TICKS):
        _tick(tuner, clock, stage, 2000, 1800, 8.0, share=0.005)
    assert stage.tuned_workers == 32  # 2x for 2x: the next step is 4x
    for _ in range(ASCENT_TRIAL_TICKS):
        _tick(tuner, clock, stage, 8000, 7200, 32.0, share=0.005)
    assert stage.tuned_workers == 256  # 4x for 4x: 8x, within its 256 threads
    reason = tuner.decisions()[-1].reason
    assert "at most 256 (threads)" in reason


class Calls:
    """What a map of ``workers`` threads does over one look, as a model: calls that take
    ``wall`` seconds, ``cpu`` of them on a CPU, read by a consumer that takes at most
    ``demand`` elements per second, on ``cores`` CPUs. ``serialized``: the GIL runs one
    call at a time (each call's wall time is then the others' CPU time too)."""

    def __init__(self, wall: float = 0.004, cpu: float = 0.00004, demand: float = 30000.0,
                 serialized: bool = False, slower_past: int | None = None,
                 cores: int = 2) -> None:
        self.wall, self.cpu, self.demand, self.cores = wall, cpu, demand, cores
        self.serialized = serialized
        self.slower_past = slower_past  # past this many workers, an eighth of the rate

    def look(self, stage: FakeStage, seconds: float = PERIOD) -> None:
        workers = stage.tuned_workers
        wall = self.cpu * workers if self.serialized else self.wall
        capacity = min(workers / wall, self.cores / self.cpu)  # the CPUs: a limit too
        if self.slower_past is not None and workers > self.slower_past:
            capacity /= 8
        rate = min(capacity, self.demand)
        elements = round(rate * seconds)
        waits = round(elements * (0.6 if capacity < self.demand else 0.02))
        stage.advance(elements, waits, rate * wall, seconds, cpu_share=self.cpu / wall)



def _run(tuner: Tuner, clock: list[float], stage: FakeStage, calls: Calls,
         looks: int) -> list[int]:
    """``looks`` looks of the tuner, a period apart; the workers after each."""
    settings = []
    for _ in range(looks):
        clock[0] += PERIOD
        calls.look(stage)
        tuner.tick()
        settings.append(stage.tuned_workers)
    return settings


def test_calls_that_wait_grow_past_the_cores_settle_within_three_seconds_and_stay():
    # 4 ms calls on a CPU 1% of their time, a consumer that takes 10,000 elements/s: 40
    # workers keep up with it. From the 4 the stage starts at (its executor choice's
    # measurement): doubling, then steps four and eight times as large while the rate
    # scales with them (up to 200: their CPU time would fill 2 cores), then trimmed to
    # twice the most its tasks keep busy (threads of calls that wait cost nothing idle).
    stage = FakeStage(workers=4, threads=256, cores=2)
    tuner = Tuner(period=3600)
    try:
        stage.counters = tuner.register(stage)
        now = [100.0]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(tuner_module.time, "perf_counter", lambda: now[0])
            calls = Calls(demand=10000)
            settings = _run(tuner, now, stage, calls, looks=13)  # 3.25 seconds
            assert [(d.old, d.new) for d in tuner.decisions()] == \
                [(4, 8), (8, 32), (32, 200), (200, 80)]
            assert settings[-1] == 80  # 40 busy workers, twice
            # A steady pipeline: nothing changes for a minute.
            assert set(_run(tuner, now, stage, calls, looks=240)) == {80}
            assert len(tuner.decisions()) == 4
    finally:
        tuner.stop()
    first, second, last, trim = tuner.decisions()
    assert first.figures["cpu_share"] == pytest.approx(0.01)
    assert first.figures["bound"] == 200  # 2 cores / 1%: 200 threads' CPU fills 2 cores
    # The rate each step was taken at: linear in the workers (4 ms calls).
    assert [d.figures["rate"] for d in (first, second, last)] == \
        pytest.approx([1000, 2000, 8000])
    assert trim.figures["peak"] == pytest.approx(40)
    assert "its calls on a CPU 1.0% of their time: 200 threads' CPU fills its cores" in \
        last.reason


def test_calls_that_wait_keep_their_threads_while_the_rate_rises_with_them(clock,
                                                                        tuner_with):
    # A consumer that takes 30,000 elements/s: 200 workers (their bound) are kept, those
    # 120 busy need twice as many; no change for a minute after.
    stage = FakeStage(workers=4, threads=256, cores=2)
    tuner = tuner_with(stage)
    settings = _run(tuner, clock, stage, Calls(demand=30000), looks=4 * 60)
    assert settings[12:] == [200] * (len(settings) - 12)
    assert [(d.old, d.new) for d in tuner.decisions()] == [(4, 8), (8, 32), (32, 200)]
    assert "its calls on a CPU 1.0% of their time: 200 threads' CPU fills its cores" in \
        tuner.decisions()[-1].reason


def test_calls_that_hold_the_gil_do_not_keep_threads_that_do_not_help(clock, tuner_with):
    # Serialized calls look like waiting ones when contended (4 threads: on a CPU a quarter
    # of their time), so the stage may try 8; the rate does not rise while its consumer
    # waits: undone, then fewer are tried while as fast, down to one worker.
    stage = FakeStage(workers=4, threads=256, cores=2)
    tuner = tuner_with(stage)
    calls = Calls(cpu=0.002, serialized=True)
    settings = _run(tuner, clock, stage, calls, looks=4 * 60)
    changes = [(d.old, d.new) for d in tuner.decisions() if d.old != d.new]
    assert changes[:2] == [(4, 8), (8, 4)]
    assert "did not help" in tuner.decisions()[1].reason
    assert max(settings) == 8 and settings.count(8) <= 4 * ASCENT_TRIAL_TICKS
    assert settings[-1] == 1
    # At one worker, the calls measure on a CPU all their time: no threads past its CPU
    # workers are tried again, and one more is tried less and less often.
    assert max(settings[settings.index(1):]) <= 2


def test_a_grow_that_overshoots_is_tried_again_half_as_large(clock, tuner_with):
    # Past 64 threads, the rate falls to an eighth (the GIL's hand-offs): 32 -> 200 (its
    # bound) is slower, then 32 -> 128 too, then 32 -> 64 is faster.
    stage = FakeStage(workers=4, threads=256, cores=2)
    tuner = tuner_with(stage)
    _run(tuner, clock, stage, Calls(slower_past=64, demand=1e6), looks=40)
    changes = [(d.old, d.new) for d in tuner.decisions()]
    assert changes[:7] == [(4, 8), (8, 32), (32, 200), (200, 32), (32, 128), (128, 32),
                           (32, 64)]
    assert stage.tuned_workers == 64


def test_waiting_calls_grow_within_the_ram_budget_and_come_down_when_elements_grow(
        clock, tuner_with):
    stage = FakeStage(workers=4, threads=256, cores=2, ram_budget=40 * 65536,
                      bytes_per_worker=65536.0)
    tuner = tuner_with(stage)
    _run(tuner, clock, stage, Calls(), looks=20)
    assert stage.tuned_workers == 40
    assert "the RAM budget holds 40 workers" in tuner.decisions()[-1].reason
    assert tuner.decisions()[-1].figures["by_ram"] == 40
    stage.bytes_per_worker = 4 * 65536.0  # bigger elements: 10 workers fit
    _run(tuner, clock, stage, Calls(), looks=2)
    assert stage.tuned_workers == 10
    assert "40 workers hold more than the RAM budget allows" in tuner.decisions()[-1].reason


def test_an_explicit_cpu_budget_bounds_the_cpu_time_of_waiting_calls(clock, tuner_with):
    # cpu_budget=1: one core. Calls on a CPU 10% of their time: 10 threads' CPU is one
    # core's worth, the bound; calls that compute keep one worker.
    stage = FakeStage(workers=1, threads=256, cores=1)
    tuner = tuner_with(stage)
    _run(tuner, clock, stage, Calls(wall=0.004, cpu=0.0004, demand=1e6), looks=40)
    assert stage.tuned_workers == 10
    assert tuner.decisions()[-1].figures["by_cpu"] == 10
    busy = FakeStage(workers=1, threads=256, cores=1)
    tuner = tuner_with(busy)
    _run(tuner, clock, busy, Calls(wall=0.004, cpu=0.004, demand=1e6), looks=40)
    assert busy.tuned_workers == 1 and tuner.decisions() == ()


def test_a_grow_is_kept_when_its_consumer_set_the_rate(clock, tuner_with):
    # During the trial the consumer hardly waited for the stage and the rate stayed: the
    # consumer (or the machine) was the limit, which says nothing of the workers.
    stage = FakeStage(workers=4, threads=256, cores=2)
    tuner = tuner_with(stage)
    _tick(tuner, clock, stage, 1000, 900, 4.0, share=0.01)
    _tick(tuner, clock, stage, 1000, 900, 4.0, share=0.01)
    assert stage.tuned_workers == 8
    for _ in range(ASCENT_TRIAL_TICKS):
        _tick(tuner, clock, stage, 1000, 20, 4.0, share=0.01)
    assert stage.tuned_workers == 8 and len(tuner.decisions()) == 1
    # ... but one that makes the stage clearly slower is undone, waited on or not.
    other = FakeStage(workers=4, threads=256, cores=2)
    tuner = tuner_with(other)
    _tick(tuner, clock, other, 1000, 900, 4.0, share=0.01)
    _tick(tuner, clock, other, 1000, 900, 4.0, share=0.01)
    for _ in range(ASCENT_TRIAL_TICKS):
        _tick(tuner, clock, other, 800, 20, 4.0, share=0.01)
    assert other.tuned_workers == 4


def test_every_change_is_logged_with_its_reason(clock, tuner_with, caplog):
    stage = FakeStage(workers=8)
    tuner = tuner_with(stage)
    with caplog.at_level(logging.INFO, logger="feedline.autotune"):
        _tick(tuner, clock, stage, 1000, 900, 1.0)
        _tick(tuner, clock, stage, 1000, 900, 1.5)
    (record,) = caplog.records
    assert record.name == "feedline.autotune"
    assert "map(f): workers 8 -> 2" in record.getMessage()
    assert "kept 1.5 workers busy" in record.getMessage()


def test_a_stage_measuring_its_executor_is_left_alone(clock, tuner_with):
    stage = FakeStage(workers=8)
    tuner = tuner_with(stage)
    stage.tuning_paused = True
    for _ in range(4):
        _tick(tuner, clock, stage, 1000, 0, 0.5)
    assert stage.tuned_workers == 8 and tuner.decisions() == ()
    stage.tuning_paused = False
    _tick(tuner, clock, stage, 1000, 0, 0.5)  # first look after: only remembered
    assert stage.tuned_workers == 8
    _tick(tuner, clock, stage, 1000, 0, 0.5)
    assert stage.tuned_workers == 1


def test_busy_workers_are_explored_one_fewer_and_kept_fewer_when_as_fast(clock, tuner_with):
    stage = FakeStage(workers=3)
    tuner = tuner_with(stage)
    # Every worker busy, the consumer rarely waiting (the stage is ahead of it): only
    # trying one fewer tells whether all of them are needed. Not before EXPLORE_TICKS
    # looks: the setting it started from was measured, and a try costs a second.
    for _ in range(EXPLORE_TICKS - 1):
        _tick(tuner, clock, stage, 1000, 50, 3.0)
    assert stage.tuned_workers == 3 and tuner.decisions() == ()
    _tick(tuner, clock, stage, 1000, 50, 3.0)
    assert stage.tuned_workers == 2
    assert "trying one worker fewer" in tuner.decisions()[-1].reason
    _trial(tuner, clock, stage, 990, 50, 2.0)  # within 3%: fewer kept
    assert stage.tuned_workers == 2
    assert tuner.decisions()[-1].reason.startswith("2 workers were as fast as 3")
    looks = 0
    while stage.tuned_workers == 2:  # tried again later: one fewer now is slower
        _tick(tuner, clock, stage, 990, 50, 2.0)
        looks += 1
        assert looks <= EXPLORE_TICKS
    assert stage.tuned_workers == 1
    _trial(tuner, clock, stage, 600, 50, 1.0)
    assert stage.tuned_workers == 2
    assert "fewer workers were slower (600 vs 990" in tuner.decisions()[-1].reason


def test_a_stage_its_consumer_waits_for_is_not_explored_down(clock, tuner_with):
    stage = FakeStage(workers=2)
    tuner = tuner_with(stage)
    for _ in range(EXPLORE_TICKS + 5):  # at its maximum, busy, waited on: left as it is
        _tick(tuner, clock, stage, 1000, 500, 2.0)
    assert stage.tuned_workers == 2 and tuner.decisions() == ()


def test_a_stage_waiting_on_its_input_does_not_grow_and_tries_fewer(clock, tuner_with):
    # The consumer waits, the workers are busy, but the stage spends 70% of the time
    # pulling its input: more workers cannot help (their GIL time slows the pulling
    # thread); one fewer is tried even though its consumer waits.
    stage = FakeStage(workers=4)
    stage.tuned_workers = 2
    tuner = tuner_with(stage)
    stage.advance(0, 0, 0.0)
    for _ in range(2):
        clock[0] += 1.0
        stage.advance(1000, 500, 1.9, pulling=0.7)
        tuner.tick()
    assert stage.tuned_workers == 1
    assert "its input took 70% of the time" in tuner.decisions()[-1].reason
    for _ in range(TRIAL_TICKS):
        clock[0] += 1.0
        stage.advance(1100, 500, 0.95, pulling=0.7)
        tuner.tick()
    assert stage.tuned_workers == 1  # as fast (faster): kept
    assert [(d.old, d.new) for d in tuner.decisions()] == [(2, 1), (1, 1)]


def test_failed_tries_of_one_fewer_come_less_and_less_often(clock, tuner_with):
    stage = FakeStage(workers=2)
    tuner = tuner_with(stage)
    tries = []
    for look in range(EXPLORE_TICKS * 8):
        slower = stage.tuned_workers == 1
        _tick(tuner, clock, stage, 600 if slower else 1000, 50, 1.0 if slower else 2.0)
        if tuner.decisions() and len(tuner.decisions()) > 2 * len(tries):
            tries.append(look)
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert len(tries) >= 3
    assert gaps[1] > gaps[0]  # the second wait is longer than the first


def test_a_stage_whose_calls_hold_the_gil_starts_at_one_worker(clock, tuner_with):
    # Its executor choice measured calls serialized by the GIL and kept threads: as soon
    # as that measurement ends (the stage no longer paused), one worker.
    stage = FakeStage(workers=4)
    stage.tuned_workers = 2
    tuner = tuner_with(stage)
    stage.tuning_paused = True
    _tick(tuner, clock, stage, 1000, 0, 1.0)
    assert stage.tuned_workers == 2
    stage.tuning_paused = False
    stage.measured_calls = CallMeasurement(gil_share=0.95, busy_together=0.5, concurrency=2.0)
    _tick(tuner, clock, stage, 1000, 0, 1.0)
    assert stage.tuned_workers == 1
    assert "its calls hold the GIL 95% of their time" in tuner.decisions()[-1].reason
    # Used once: the grow rule may add workers later.
    stage.tuned_workers = 3
    _tick(tuner, clock, stage, 1000, 0, 1.0)
    assert stage.tuned_workers == 3


def _serial_trial(clock, tuner_with, stage, rate_alone):
    """Two workers measured serialized at 1,000 elements/s: one worker, tried at
    ``rate_alone``."""
    stage.measured_calls = CallMeasurement(gil_share=1.0, busy_together=0.45,
                                           concurrency=2.0, rate=1000.0)
    tuner = tuner_with(stage)
    _tick(tuner, clock, stage, 1000, 500, 1.0)
    assert stage.tuned_workers == 1
    _trial(tuner, clock, stage, rate_alone, 500, 1.0)
    return stage, tuner


@pytest.mark.parametrize(("rate_alone", "kept"), [(1100, True), (600, False)])
def test_one_worker_for_serial_calls_is_kept_unless_slower_than_measured(
        clock, tuner_with, rate_alone, kept):
    # A machine busy with other work can make calls that run in parallel look serialized:
    # one worker is judged on the rate its executor choice measured with two.
    stage, tuner = _serial_trial(clock, tuner_with, FakeStage(workers=2), rate_alone)
    assert stage.tuned_workers == (1 if kept else 2)
    if not kept:
        assert "one worker was slower (600 elements/s) than 2 measured (1,000)" in \
            tuner.decisions()[-1].reason


@pytest.mark.parametrize(("rate_alone", "threads", "share"), [
    (500, 4, "0%"),  # two ran twice as fast as one: the calls hardly hold the GIL
    (770, 3, "54%"),  # 1.3x: Amdahl over the GIL gives 54%, 1.3 / 0.54: 3 threads
    (900, 2, "80%"),  # 1.11x: two are enough
])
def test_serial_calls_that_were_not_go_to_the_threads_their_scaling_says(
        clock, tuner_with, rate_alone, threads, share):
    # Measured serialized (a busy machine), but one worker was slower than two: the rates
    # say how much of a call holds the GIL, and the stage goes straight to the threads
    # that fill it, not back to two and up one at a time.
    stage = FakeStage(workers=4)
    stage.tuned_workers = 2
    stage, tuner = _serial_trial(clock, tuner_with, stage, rate_alone)
    assert stage.tuned_workers == threads
    assert f"hold the GIL about {share} of their time: {threads} threads" in \
        tuner.decisions()[-1].reason


@pytest.mark.parametrize(("idle", "threads"), [(0.15, 2), (0.5, 3), (None, 4)])
def test_the_threads_that_fill_the_cpus_are_those_the_machine_left_idle(
        clock, tuner_with, idle, threads):
    # Calls on a CPU 81% of their time running together may be waiting for a CPU, not for
    # the GIL: with 0.15 CPU idle meanwhile (images on 2 busy cores), more threads would
    # only take turns (4 ran 14% slower than 2). Unmeasured: as before, the GIL decides.
    stage = FakeStage(workers=4)
    stage.tuned_workers = 2
    stage.measured_calls = CallMeasurement(gil_share=0.3, busy_together=0.81,
                                           concurrency=2.0, idle_cpus=idle)
    tuner = tuner_with(stage)
    _tick(tuner, clock, stage, 1000, 500, 1.6)
    assert stage.tuned_workers == threads
    assert len(tuner.decisions()) == (threads > 2)


def test_serial_calls_far_faster_on_two_workers_go_back_to_two(clock, tuner_with):
    # Two ran 2.6x as fast as one (chess: its one worker ran inline): more than two workers
    # can, so the scaling says nothing of the GIL. Back to the two measured, not to every
    # CPU worker (4, 15% slower on chess).
    stage = FakeStage(workers=4)
    stage.tuned_workers = 2
    stage, tuner = _serial_trial(clock, tuner_with, stage, 385)
    assert stage.tuned_workers == 2
    assert ("2 ran 2.6x as fast as one, more than 2 workers can: something else slowed the "
            "one; back to 2") in tuner.decisions()[-1].reason


def test_long_calls_that_hold_the_gil_keep_their_workers_and_grow_one_at_a_time(
        clock, tuner_with):
    # A 2 ms call measured serialized by the GIL: a worker thread's hand-off is nothing to
    # it, and its threads overlap its NumPy parts and the input's reads (chess: one worker
    # 194k records/s, two 310k). It keeps its workers; its consumer waiting, it grows by
    # one (an ascent to 4 would cost a quarter of a short run), each step judged.
    stage = FakeStage(workers=4)
    stage.tuned_workers = 2
    stage.measured_calls = CallMeasurement(gil_share=1.0, busy_together=0.49,
                                           concurrency=2.0, rate=600.0,
                                           seconds_per_call=2e-3)
    assert not short_calls(stage.measured_calls)
    tuner = tuner_with(stage)
    _tick(tuner, clock, stage, 600, 200, 1.5)
    assert stage.tuned_workers == 2 and not tuner.decisions()
    _tick(tuner, clock, stage, 600, 200, 1.5)
    assert stage.tuned_workers == 3
    assert "its consumer waited for 33% of calls" in tuner.decisions()[-1].reason


def test_short_calls_are_those_a_hand_off_to_a_thread_weighs_on():
    measured = CallMeasurement(gil_share=1.0, busy_together=0.5, concurrency=2.0)
    assert short_calls(measured)  # unmeasured: as before the call times were kept
    assert short_calls(CallMeasurement(1.0, 0.5, 2.0, seconds_per_call=40e-6))
    assert not short_calls(CallMeasurement(1.0, 0.5, 2.0, seconds_per_call=2e-3))


@pytest.mark.parametrize(("share", "alone", "threads"), [
    (0.3, 1.0, 4),  # images on 2 cores: 1 / 0.3 threads fill the GIL (4: the most)
    (0.45, 1.0, 3),
    (0.3, 0.01, 4),  # calls that mostly wait (files, sleep) hold the GIL little
])
def test_calls_that_leave_cpus_idle_get_the_threads_that_fill_the_gil_at_once(
        clock, tuner_with, share, alone, threads):
    stage = FakeStage(workers=4)
    stage.tuned_workers = 2
    stage.measured_calls = CallMeasurement(gil_share=share, busy_together=0.77,
                                           concurrency=2.0, busy_alone=alone)
    tuner = tuner_with(stage)
    _tick(tuner, clock, stage, 1000, 500, 1.9)
    assert stage.tuned_workers == threads
    assert (f"on a CPU 77% of their time, and each alone held the GIL {share * alone:.0%} "
            f"of its time: {threads} threads fill the CPUs") in tuner.decisions()[-1].reason


def test_calls_that_wait_start_an_ascent_from_its_largest_step(clock, tuner_with):
    # A 4 ms sleep on 2 cores: on a CPU 0.5-1% of their time, measured at 480 elements/s with
    # 2. The first step is an ascent's largest (8x: 16 threads, within the 200 whose CPU
    # time fills 2 cores), judged as one; it scaled linearly, so the next is 8x too, within
    # its 256 threads (a 2 ms sleep ran 0.78-0.84x of 16 fixed threads over a 2 s run when
    # the first step was its 4 CPU workers).
    stage = FakeStage(workers=4, threads=256, cores=2)
    stage.tuned_workers = 2
    stage.measured_calls = CallMeasurement(gil_share=0.9, busy_together=0.01,
                                           concurrency=2.0, busy_alone=0.02, rate=480.0)
    tuner = tuner_with(stage)
    _tick(tuner, clock, stage, 480, 470, 2.0, share=0.005)
    assert stage.tuned_workers == 16
    assert tuner.decisions()[-1].figures["bound"] == 200
    for _ in range(ASCENT_TRIAL_TICKS - 1):
        _tick(tuner, clock, stage, 3840, 3700, 16.0, share=0.005)
    assert stage.tuned_workers == 16
    _tick(tuner, clock, stage, 3840, 3700, 16.0, share=0.005)  # 8x for 8x: 8x next
    assert stage.tuned_workers == 128
    for _ in range(ASCENT_TRIAL_TICKS):
        _tick(tuner, clock, stage, 30720, 29600, 128.0, share=0.005)
    assert stage.tuned_workers == 256  # within its 256 threads
    assert [(d.old, d.new) for d in tuner.decisions()] == [(2, 16), (16, 128), (128, 256)]


def test_a_first_step_for_calls_that_wait_that_does_not_pay_is_undone(clock, tuner_with):
    # Calls that looked waiting on a loaded machine but hold the GIL: 16 threads no faster
    # than the 2 measured, judged like any step of an ascent, go back to 2.
    stage = FakeStage(workers=4, threads=256, cores=2)
    stage.tuned_workers = 2
    stage.measured_calls = CallMeasurement(gil_share=0.9, busy_together=0.1,
                                           concurrency=2.0, busy_alone=0.2, rate=480.0)
    tuner = tuner_with(stage)
    _tick(tuner, clock, stage, 480, 470, 2.0, share=0.1)
    assert stage.tuned_workers == 16
    for _ in range(ASCENT_TRIAL_TICKS):
        _tick(tuner, clock, stage, 470, 460, 16.0, share=0.1)
    assert stage.tuned_workers < 16
    assert "did not help" in tuner.decisions()[-1].reason


def test_calls_on_a_cpu_part_of_their_time_fill_without_an_ascent(clock, tuner_with):
    # Images (on a CPU 77% of their time): the fill is a setting, not a step of an ascent.
    stage = FakeStage(workers=4)
    stage.tuned_workers = 2
    stage.measured_calls = CallMeasurement(gil_share=0.3, busy_together=0.77,
                                           concurrency=2.0, rate=500.0)
    tuner = tuner_with(stage)
    _tick(tuner, clock, stage, 1000, 500, 1.9)
    assert stage.tuned_workers == 4
    control = next(iter(tuner._known.values()))
    assert control.trial is None and control.factor == 2


@pytest.mark.parametrize("measured", [
    None,  # not measured
    # Two threads' GIL time already fills the GIL.
    CallMeasurement(gil_share=0.7, busy_together=0.6, concurrency=2.0),
    CallMeasurement(gil_share=0.1, busy_together=0.97, concurrency=2.0),  # CPUs all busy
    # Too few calls at once for the shares to mean much (a process's first calls, its
    # imports: images measured as serialized).
    CallMeasurement(gil_share=1.0, busy_together=0.43, concurrency=1.65),
])
def test_other_measured_calls_keep_the_stages_workers(clock, tuner_with, measured):
    stage = FakeStage(workers=4)
    stage.tuned_workers = 2
    stage.measured_calls = measured
    tuner = tuner_with(stage)
    _tick(tuner, clock, stage, 1000, 500, 1.9)
    assert stage.tuned_workers == 2 and tuner.decisions() == ()


def test_failed_tries_of_one_more_come_less_and_less_often(clock, tuner_with):
    # Waited on and busy, but one more worker never helps: each try costs a second at the
    # slower setting, so the pause after a failed one doubles.
    stage = FakeStage(workers=2)
    stage.tuned_workers = 1
    tuner = tuner_with(stage)
    tries = []
    for look in range(PAUSE_TICKS * 12):
        _tick(tuner, clock, stage, 1000, 500, stage.tuned_workers * 0.95)
        grows = sum(d.new > d.old for d in tuner.decisions())
        if grows > len(tries):
            tries.append(look)
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert len(tries) >= 3
    assert gaps[1] > gaps[0] + PAUSE_TICKS // 2
    assert all("one more worker did not help" in d.reason
               for d in tuner.decisions() if d.new < d.old)
    assert all(d.new == 2 for d in tuner.decisions() if d.new > d.old)


def test_a_consumer_that_stopped_reading_changes_nothing(clock, tuner_with):
    stage = FakeStage(workers=4)
    tuner = tuner_with(stage)
    for _ in range(5):
        _tick(tuner, clock, stage, 0, 0, 0.0)
    assert stage.tuned_workers == 4 and tuner.decisions() == ()


def test_the_next_epochs_iterator_starts_from_the_setting_and_shares_counters(clock, tuner_with):
    first = FakeStage(workers=8)
    tuner = tuner_with(first)
    _tick(tuner, clock, first, 1000, 0, 1.0)
    _tick(tuner, clock, first, 1000, 0, 1.0)
    assert first.tuned_workers == 2
    second = FakeStage(workers=8)
    second.counters = tuner.register(second)
    assert second.tuned_workers == 2 and second.counters is first.counters


def _slow_source(count: int):
    def slow(x):
        time.sleep(0.0005)
        return x
    return fl.Dataset.range(count).map(slow)


@pytest.mark.skipif(fl.Options().autotune_parallelism() < 2, reason="one worker: nothing to trim")
def test_a_map_waiting_on_a_slow_input_is_trimmed_and_output_is_exact():
    ds = _slow_source(3000).map(lambda x: x * 2, num_parallel_calls=fl.AUTOTUNE,
                                name="double")
    options = fl.Options(profiling=fl.ProfilingOptions(statistics=True),
                         autotune=fl.AutotuneOptions(choose_executor=False))
    with no_leaked_threads(timeout=10), iter(ds.with_options(options)) as it:
        assert [int(x) for x in it] == [2 * i for i in range(3000)]
        tuning = it.statistics().tuning
    assert tuning, "the tuner changed nothing"
    # Its workers wait on the input: one is enough.
    assert tuning[0].stage == "double" and tuning[0].new == 1
    assert tuning[0].old == fl.Options().autotune_parallelism()


def test_tuning_off_keeps_every_worker():
    ds = _slow_source(600).map(lambda x: x, num_parallel_calls=fl.AUTOTUNE)
    options = fl.Options(profiling=fl.ProfilingOptions(statistics=True),
                         autotune=fl.AutotuneOptions(tune=False, choose_executor=False))
    with iter(ds.with_options(options)) as it:
        assert len(list(it)) == 600
        assert it.statistics().tuning == ()
        assert it._ctx.tuner is None


def test_checkpoints_do_not_depend_on_the_tuning():
    ds = fl.Dataset.range(200).map(lambda x: x + 1, num_parallel_calls=fl.AUTOTUNE)
    with iter(ds) as it:
        it._root.tuned_workers = 1
        head = [int(next(it)) for _ in range(50)]
        state = it.state_dict()
    with iter(ds.with_options(fl.Options(autotune=fl.AutotuneOptions(tune=False)))) as again:
        again.load_state_dict(state)
        assert head + [int(x) for x in again] == list(range(1, 201))


# A map over a range whose function is elementwise (``lambda x: x + 1``) runs as NumPy
# chunks (feedline.optimize.map_vectorization), whatever its num_parallel_calls: tests of
# the map's tuning turn that rewrite off.
NOT_VECTORIZED = fl.Options(optimization=fl.OptimizationOptions(map_vectorization=False))


def _prefetch(it):
    """The pipeline's last prefetch: AUTOTUNE's placement wraps a pipeline ending with
    ``prefetch(AUTOTUNE)``, also where it stays on threads (``processes=False``)."""
    from feedline.placement.auto import AutoProcessesIterator

    root = it._root
    return root._inner if isinstance(root, AutoProcessesIterator) else root


def test_prefetch_stays_within_a_small_ram_budget_with_big_elements():
    megabyte = 1 << 20

    def big(i):
        time.sleep(0.002)
        return np.full(megabyte, i % 251, np.uint8)

    ds = fl.Dataset.range(60).map(big).prefetch(fl.AUTOTUNE)
    options = fl.Options(autotune=fl.AutotuneOptions(ram_budget=3 * megabyte,
                                                     processes=False))
    capacities = []
    with iter(ds.with_options(options)) as it:
        for i, element in enumerate(it):
            assert element[0] == i % 251
            capacities.append(_prefetch(it).capacity)
            if i % 4 == 3:
                time.sleep(0.02)  # a bursty consumer: it drains the buffer after a pause
    assert max(capacities) * megabyte <= 3 * megabyte
    assert max(capacities) == 3  # it did grow to the budget


def test_prefetch_autotune_does_not_deepen_a_buffer_its_slower_input_leaves_empty():
    # The input is slower than the consumer at every call: any buffer stays empty, and
    # a deeper one only reads further ahead.
    def slow(i):
        time.sleep(0.002)
        return i

    ds = fl.Dataset.range(60).map(slow).prefetch(fl.AUTOTUNE)
    options = fl.Options(autotune=fl.AutotuneOptions(processes=False))
    with iter(ds.with_options(options)) as it:
        assert [int(x) for x in it] == list(range(60))
        assert _prefetch(it).capacity == 1


def test_prefetch_autotune_does_not_deepen_for_an_input_slower_on_average_but_bursty():
    # Four workers of 4 ms calls deliver about four elements at once every 4 ms; the
    # consumer takes each at once. Its calls drain the buffer at every burst, but the
    # input is slower on average: no depth raises the rate (drains alone grew it to 16).
    def slow(i):
        time.sleep(0.004)
        return i

    options = fl.Options(autotune=fl.AutotuneOptions(processes=False))
    ds = fl.Dataset.range(300).map(slow, num_parallel_calls=4).prefetch(fl.AUTOTUNE)
    with no_leaked_threads(), iter(ds.with_options(options)) as it:
        assert [int(x) for x in it] == list(range(300))
        assert _prefetch(it).capacity == 1


def test_an_autotune_map_chooses_its_executor_once_per_run_not_every_epoch(monkeypatch):
    from feedline.placement import map_executor
    from feedline.placement import runner as runner_module

    made = []

    class Counting(map_executor.ExecutorChoice):
        def __init__(self, *args, **kwargs):
            made.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(runner_module, "ExecutorChoice", Counting)
    ds = fl.Dataset.range(300).map(lambda x: x + 1, num_parallel_calls=fl.AUTOTUNE).repeat(4)
    options = fl.Options(autotune=fl.AutotuneOptions(processes=False)).merge(NOT_VECTORIZED)
    with iter(ds.with_options(options)) as it:
        assert [int(x) for x in it] == list(range(1, 301)) * 4
    assert len(made) == 1  # one choice for the stage, measured over its epochs


def _map_stage(options: fl.Options):
    ds = fl.Dataset.range(50).map(lambda x: x + 1, num_parallel_calls=fl.AUTOTUNE)
    return ds.with_options(fl.Options(optimization=fl.OptimizationOptions(
        inject_prefetch=False, map_vectorization=False)).merge(options))


@pytest.mark.parametrize("budget", [None, 1])
def test_a_tuned_map_may_grow_past_its_cpus_for_calls_that_wait_whatever_the_budget(budget):
    # Calls that compute: two threads per CPU without a budget, the budget with one. Calls
    # that wait use no CPU meanwhile: up to MAX_THREADS, budget or not (the tuner bounds
    # them by their measured CPU time and the RAM budget).
    from feedline.execution.stage_knobs import MAX_THREADS, OVERSUBSCRIPTION

    options = fl.Options(autotune=fl.AutotuneOptions(processes=False, cpu_budget=budget))
    start = options.autotune_parallelism()
    with no_leaked_threads(), iter(_map_stage(options)) as it:
        stage = it._root.knobs
        assert stage.tuned_workers == start  # it starts at its CPU budget
        assert stage.cores == start
        assert stage.cpu_workers == (start * OVERSUBSCRIPTION if budget is None else 1)
        assert stage.max_workers == MAX_THREADS
        assert stage.ram_budget == options.autotune_ram_budget()
        stage.tuned_workers = stage.max_workers + 5
        assert stage.tuned_workers == stage.max_workers  # never past its threads
        assert [int(x) for x in it] == list(range(1, 51))


def test_max_parallelism_bounds_a_tuned_maps_threads():
    options = fl.Options(autotune=fl.AutotuneOptions(processes=False),
                         threading=fl.ThreadingOptions(max_parallelism=24))
    with no_leaked_threads(), iter(_map_stage(options)) as it:
        stage = it._root.knobs
        assert stage.max_workers == 24 and stage.cpu_workers == stage.cores
        assert [int(x) for x in it] == list(range(1, 51))


def test_a_map_measures_the_bytes_a_worker_holds():
    from feedline.execution.map_knobs import THREAD_BYTES

    options = fl.Options(autotune=fl.AutotuneOptions(processes=False, choose_executor=False))
    ds = _map_stage(options).map(lambda x: np.zeros(1000, np.uint8),
                                 num_parallel_calls=fl.AUTOTUNE)
    with no_leaked_threads(), iter(ds) as it:
        assert len(list(it)) == 50
        stage = it._root.knobs
        # Two tasks in flight per worker, of one element each (slow enough calls would be
        # chunked otherwise: these are fast, so their chunks hold several).
        per_element = 64 + 1000  # its input (a scalar), its result
        chunk = stage.chunk_size
        assert stage.bytes_per_worker == 2 * chunk * per_element + THREAD_BYTES


def _first_decision(fn, done, budget: int | None = None, choose_executor: bool = True):
    """Reads ``map(fn, AUTOTUNE)`` over ``range(200)`` repeated, checking every epoch's
    output, until the tuner makes a decision for which ``done(decision)`` holds; returns it."""
    options = fl.Options(autotune=fl.AutotuneOptions(processes=False, cpu_budget=budget,
                                                     choose_executor=choose_executor),
                         profiling=fl.ProfilingOptions(statistics=True)).merge(NOT_VECTORIZED)
    ds = fl.Dataset.range(200).map(fn, num_parallel_calls=fl.AUTOTUNE)
    deadline = time.monotonic() + 60
    with no_leaked_threads(), iter(ds.repeat().with_options(options)) as it:
        while not any(done(d) for d in it.statistics().tuning):
            assert [int(next(it)) for _ in range(200)] == list(range(200))
            assert time.monotonic() < deadline, (
                f"timed out after 60 s waiting for the tuner's decision; it made: "
                f"{it.statistics().tuning}")
        return next(d for d in it.statistics().tuning if done(d))


def test_an_autotune_map_of_calls_holding_the_gil_settles_inline(monkeypatch):
    # Short calls (50 µs) measured serialized by the GIL (the lock in the closure does not
    # pickle: they stay on threads): one worker would only add a hand-off per task, so the
    # stage calls its function on its consumer's thread. The output is exact meanwhile.
    from feedline.core.validation import schedulable_cpus

    if schedulable_cpus() < 2:
        pytest.skip("the executor choice measures nothing on one CPU")
    measure_as(monkeypatch, serialized_short)
    unpicklable = threading.Lock()

    def spin(x):
        with unpicklable:
            pass
        return x

    decision = _first_decision(spin, lambda d: d.setting == "inline")
    assert (decision.old, decision.new) == (0, 1)
    assert decision.figures["gil_share"] == pytest.approx(1.0)


def test_a_threads_only_autotune_map_of_calls_holding_the_gil_also_settles_inline(
        monkeypatch):
    # AutotuneOptions(choose_executor=False) keeps the map off processes, not unmeasured: a
    # picklable function the GIL serializes runs on its consumer's thread too (on two
    # threads it ran 0.64x the inline map in benchmarks/gil_map.py).
    from feedline.core.validation import schedulable_cpus

    if schedulable_cpus() < 2:
        pytest.skip("the executor choice measures nothing on one CPU")
    measure_as(monkeypatch, serialized_short)
    decision = _first_decision(_identity, lambda d: d.setting == "inline",
                               choose_executor=False)
    assert (decision.old, decision.new) == (0, 1)
    assert decision.figures["gil_share"] == pytest.approx(1.0)


def _identity(x):
    return x


def test_an_autotune_map_of_waiting_calls_gets_every_thread_at_once(monkeypatch):
    # Calls measured waiting leave their CPUs idle: the stage takes an ascent's largest step
    # at once (8x its workers, within the threads whose CPU time fills its cores). The
    # output is exact meanwhile.
    from feedline.core.validation import schedulable_cpus

    if schedulable_cpus() < 2:
        pytest.skip("the executor choice measures nothing on one CPU")
    measure_as(monkeypatch, waiting)
    decision = _first_decision(lambda x: x, lambda d: d.new > d.old)
    assert decision.new == max(2 * decision.old,
                               min(int(decision.figures["bound"]), 8 * decision.old))


def test_wake_makes_the_tuner_look_before_its_period_ends():
    # The executor choice's measurement is acted on at once, not up to a period later.
    stage = FakeStage(workers=2)
    stage.measured_calls = CallMeasurement(gil_share=1.0, busy_together=0.5, concurrency=2.0)
    tuner = Tuner(period=3600)
    stage.counters = tuner.register(stage)
    try:
        tuner.wake()
        deadline = time.monotonic() + 10
        while stage.tuned_workers != 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        tuner.stop()
    assert tuner._thread is None or not tuner._thread.is_alive()
    assert "hold the GIL 100%" in tuner.decisions()[-1].reason


@pytest.mark.parametrize("budget", [None, 1])
def test_an_autotune_map_of_calls_that_wait_grows_past_its_cpu_workers(monkeypatch, budget):
    # Calls that sleep: their measured CPU time is a small share of their wall time, so
    # the stage grows past two threads per CPU (or past its CPU budget of one), as far as
    # the rate rises. Every thread ends with the pipeline (no_leaked_threads), the output
    # is exact meanwhile.
    from feedline.core.validation import schedulable_cpus

    measure_as(monkeypatch, waiting)

    def fetch(x):
        time.sleep(0.002)
        return x

    cpu_workers = 1 if budget == 1 else 2 * schedulable_cpus()
    decision = _first_decision(fetch, lambda d: d.new > cpu_workers, budget)
    assert decision.figures["cpu_share"] < 0.5
    assert decision.figures["bound"] > cpu_workers


# ---------------------------------------------------------------------- several stages
def _two_stages(tuner_with, first: FakeStage, second: FakeStage) -> Tuner:
    tuner = tuner_with(first)
    second.counters = tuner.register(second)
    return tuner


def _look_at(tuner: Tuner, clock: list[float], *figures: tuple[FakeStage, int, int, float]
             ) -> None:
    """One look, each stage having handed out ``elements``, ``waits`` of them waited for,
    with ``occupied`` workers busy."""
    clock[0] += 1.0
    for stage, elements, waits, occupied in figures:
        stage.advance(elements, waits, occupied)
    tuner.tick()


def _changes(tuner: Tuner) -> list[tuple[str, int, int]]:
    return [(d.stage, d.old, d.new) for d in tuner.decisions()]


def test_of_two_stages_that_would_grow_only_the_more_loaded_grows_then_the_other(
        clock, tuner_with):
    # Both waited for by their consumers, both busy: the model's bottleneck among them
    # (map(b): 95% busy, map(a): 70%) grows; map(a) records nothing, and grows at the next
    # look, while map(b)'s step is on trial.
    a, b = FakeStage("map(a)", workers=16), FakeStage("map(b)", workers=16)
    a.tuned_workers = b.tuned_workers = 2
    tuner = _two_stages(tuner_with, a, b)
    _look_at(tuner, clock, (a, 1000, 500, 1.4), (b, 1000, 500, 1.9))  # remembered
    _look_at(tuner, clock, (a, 1000, 500, 1.4), (b, 1000, 500, 1.9))
    assert (a.tuned_workers, b.tuned_workers) == (2, 4)
    assert _changes(tuner) == [("map(b)", 2, 4)]
    assert tuner.decisions()[0].figures["busy"] == pytest.approx(0.95)
    _look_at(tuner, clock, (a, 1000, 500, 1.4), (b, 1600, 500, 3.8))
    assert (a.tuned_workers, b.tuned_workers) == (4, 4)
    assert _changes(tuner) == [("map(b)", 2, 4), ("map(a)", 2, 4)]
    grew = tuner.decisions()[-1]
    assert "its consumer waited for 50% of calls while its 2 workers were 70% busy" in \
        grew.reason
    assert (grew.figures["rate"], grew.figures["busy"]) == (1000, pytest.approx(0.7))
    assert tuner.settings() == {"map(a)": 4, "map(b)": 4}


def test_two_stages_as_loaded_the_earlier_registered_grows_first(clock, tuner_with):
    a, b = FakeStage("map(a)", workers=16), FakeStage("map(b)", workers=16)
    a.tuned_workers = b.tuned_workers = 2
    tuner = _two_stages(tuner_with, a, b)
    for _ in range(2):
        _look_at(tuner, clock, (a, 1000, 500, 1.9), (b, 1000, 500, 1.9))
    assert _changes(tuner) == [("map(a)", 2, 4)]
    _look_at(tuner, clock, (a, 1600, 500, 3.8), (b, 1000, 500, 1.9))
    assert _changes(tuner) == [("map(a)", 2, 4), ("map(b)", 2, 4)]


def test_only_grows_compete_a_trim_of_another_stage_is_made_at_the_same_look(
        clock, tuner_with):
    a = FakeStage("map(a)", workers=16)
    a.tuned_workers = 2
    idle = FakeStage("map(idle)", workers=8)
    tuner = _two_stages(tuner_with, a, idle)
    for _ in range(2):
        _look_at(tuner, clock, (a, 1000, 500, 1.4), (idle, 1000, 900, 1.5))
    # The trim is made as its stage's rules run; the grow once every stage has been seen.
    assert _changes(tuner) == [("map(idle)", 8, 2), ("map(a)", 2, 4)]


def test_one_stage_alone_grows_as_it_did_without_the_others(clock, tuner_with):
    # The same figures as map(a) above: alone, it grows at the second look.
    a = FakeStage("map(a)", workers=16)
    a.tuned_workers = 2
    tuner = tuner_with(a)
    for _ in range(2):
        _look_at(tuner, clock, (a, 1000, 500, 1.4))
    assert a.tuned_workers == 4
    assert _changes(tuner) == [("map(a)", 2, 4)]
    assert "its consumer waited for 50% of calls while its 2 workers were 70% busy" in \
        tuner.decisions()[0].reason


def test_the_tuner_forgets_a_stage_whose_dataset_node_is_gone():
    # An interleave's function makes a tuned stage per element: once its node is dropped,
    # it can never register again, and its control must not pile up in the tuner.
    import gc

    class Node:
        pass

    tuner = Tuner(period=3600)
    try:
        kept, dropped = Node(), Node()
        tuner.register(FakeStage("map(a)"), key=kept)
        tuner.register(FakeStage("map(b)"), key=dropped)
        tuner.register(FakeStage("map(c)"))  # by name: kept as long as the tuner
        assert list(tuner.settings()) == ["map(a)", "map(b)", "map(c)"]
        del dropped
        gc.collect()
        assert list(tuner.settings()) == ["map(a)", "map(c)"]
    finally:
        tuner.stop()


def test_calls_that_wait_fill_whatever_cpus_a_busy_machine_left_idle(clock, tuner_with):
    # A 2 ms sleep measured on a loaded machine: on a CPU 1% of their time, no CPU idle.
    # Waiting, they take no CPU: the ascent starts from the fill all the same (it stayed at
    # 2 threads for a second, 0.12x of 16 fixed threads once moved to processes).
    stage = FakeStage(workers=4, threads=256, cores=2)
    stage.tuned_workers = 2
    stage.measured_calls = CallMeasurement(gil_share=1.0, busy_together=0.008,
                                           concurrency=2.0, busy_alone=0.02, rate=783.0,
                                           idle_cpus=0.0)
    tuner = tuner_with(stage)
    _tick(tuner, clock, stage, 780, 770, 2.0, share=0.008)
    assert stage.tuned_workers == 16
    decision = tuner.decisions()[-1]
    assert (decision.old, decision.new, decision.figures["busy_together"]) == (2, 16, 0.008)
    control = next(iter(tuner._known.values()))
    assert control.trial is not None and control.trial[0] == "grow" and control.factor == 4


def test_calls_that_wait_fill_their_cpu_workers_whatever_gil_share_they_measured(
        clock, tuner_with):
    # The same sleep, measured alone on a loaded machine as holding the GIL 52% of its time
    # (its run-queue waits): together on a CPU 0.9% of their time, they wait.
    stage = FakeStage(workers=4, threads=256, cores=2)
    stage.tuned_workers = 2
    stage.measured_calls = CallMeasurement(gil_share=0.74, busy_together=0.009,
                                           concurrency=2.0, busy_alone=0.7, rate=486.0,
                                           idle_cpus=0.0)
    tuner = tuner_with(stage)
    _tick(tuner, clock, stage, 480, 470, 2.0, share=0.009)
    assert stage.tuned_workers == 16


@pytest.mark.parametrize(("rate_inline", "kept"), [(140_000, True), (50_000, False)])
def test_inline_calls_are_judged_on_the_rate_their_consumer_took_on_threads(
        clock, tuner_with, rate_inline, kept):
    # A cheap map: its measurement counted 300k elements/s over its tasks' span, its
    # consumer took 60k a second meanwhile. Inline at 140k is faster than that (it was
    # judged slower than 300k, sent back to threads, and ran 0.67x inline); 50k is slower.
    stage = FakeStage(workers=2)
    stage.measured_calls = CallMeasurement(gil_share=1.0, busy_together=0.5,
                                           concurrency=2.0, rate=300_000.0,
                                           seconds_per_call=4e-6)
    tuner = tuner_with(stage)
    _tick(tuner, clock, stage, 60_000, 30_000, 1.0)
    assert stage.tuned_workers == 1
    assert tuner.decisions()[-1].figures["rate"] == 60_000
    _trial(tuner, clock, stage, rate_inline, 0, 1.0)
    assert stage.tuned_workers == (1 if kept else 2)
