"""AUTOTUNE maps choose threads or processes from measurement (placement.map_executor)."""

from __future__ import annotations

import logging
import time

import pytest
from gil_measurements import measure_as, serialized_by_the_gil, waiting
from process_helpers import worker_processes

import feedline as fl
from feedline.core.validation import schedulable_cpus
from feedline.placement import map_executor, policy
from feedline.placement.map_executor import ExecutorChoice, Probe
from feedline.testing import check_checkpointing
from feedline.transforms.map import MapDataset

needs_two_cpus = pytest.mark.skipif(schedulable_cpus() < 2, reason="processes need 2 CPUs")


def _busy(x):
    """About 1 ms of pure Python: holds the GIL throughout."""
    total = 0
    for i in range(30_000):
        total += i % 7
    return int(x) * 3 + total


def _busy_failing(x):
    if int(x) in (1, 13):
        raise ValueError(f"bad element {int(x)}")
    return _busy(x)


def _sleepy(x):
    time.sleep(0.002)  # releases the GIL: threads overlap it
    return int(x) * 3


def auto_map(ds: fl.Dataset, fn, **kwargs) -> fl.Dataset:
    """``ds.map(fn, num_parallel_calls=AUTOTUNE)`` with no executor (see the last test)."""
    return ds.apply(lambda d: MapDataset(d, fn, fl.AUTOTUNE, **kwargs))


@pytest.fixture(autouse=True)
def _short_window(monkeypatch):
    """A short measuring window, and a decision that does not depend on what other
    processes on the machine do: a GIL-bound stage on a machine whose other CPU is busy
    rightly stays on threads, and a loaded machine slows the threads' measured rate and
    the processes' estimate unevenly. Those two rules have their own tests below, on
    given measurements; here the GIL measurement alone decides."""
    monkeypatch.setattr(map_executor, "CONCURRENT_TASKS", 4)
    monkeypatch.setattr(map_executor, "CONCURRENT_SECONDS", 0.03)
    monkeypatch.setattr(policy, "MIN_IDLE_CPUS", 0.0)
    monkeypatch.setattr(policy, "MAP_MIN_GAIN", 0.0)
    yield
    import gc

    gc.collect()
    assert worker_processes() == []


def decision_of(ds: fl.Dataset, count: int):
    it = iter(ds)
    try:
        elements = [next(it) for _ in range(count)]
        root = it._root
        return elements, root.executor_kind, root.executor_decision
    finally:
        it.close()


@needs_two_cpus
def test_gil_bound_function_moves_to_processes_with_the_same_elements(caplog, monkeypatch):
    measure_as(monkeypatch, serialized_by_the_gil)
    with caplog.at_level(logging.DEBUG, logger="feedline.placement.map_executor"):
        elements, kind, decision = decision_of(auto_map(fl.Dataset.range(80), _busy), 80)
    assert [int(x) for x in elements] == [_busy(i) for i in range(80)]
    assert kind == "process" and decision.kind == "process", decision
    assert decision.gil_share > 0.5 and decision.process_rate > 0
    assert any("map(_busy): processes" in r.message and "GIL share" in r.message
               for r in caplog.records)


def test_function_that_releases_the_gil_stays_on_threads(monkeypatch):
    measure_as(monkeypatch, waiting)
    elements, kind, decision = decision_of(auto_map(fl.Dataset.range(60), _sleepy), 60)
    assert [int(x) for x in elements] == [3 * i for i in range(60)]
    assert kind == "thread" and decision.kind == "thread", decision
    assert "waits" in decision.reason


@needs_two_cpus
@pytest.mark.slow
def test_explicit_executors_and_the_option_are_obeyed(monkeypatch):
    for executor in ("thread", "process"):
        _, kind, decision = decision_of(
            auto_map(fl.Dataset.range(40), _busy, executor=executor), 40)
        assert (kind, decision) == (executor, None)
    # choose_executor=False: calls the GIL serializes are measured (where the tuner starts
    # the map) but stay on threads.
    measure_as(monkeypatch, serialized_by_the_gil)
    off = fl.Options(autotune=fl.AutotuneOptions(choose_executor=False))
    elements, kind, decision = decision_of(
        auto_map(fl.Dataset.range(80), _busy).with_options(off), 80)
    assert [int(x) for x in elements] == [_busy(i) for i in range(80)]
    assert kind == "thread" and decision.kind == "thread"
    assert "choose_executor=False" in decision.reason
    untuned = fl.Options(autotune=fl.AutotuneOptions(choose_executor=False, tune=False))
    _, kind, decision = decision_of(
        auto_map(fl.Dataset.range(40), _busy).with_options(untuned), 40)
    assert (kind, decision) == ("thread", None)
    # A fixed number of calls is the user's setting too: no measurement.
    ds = fl.Dataset.range(40).apply(lambda d: MapDataset(d, _busy, 2))
    _, kind, decision = decision_of(ds, 40)
    assert (kind, decision) == ("thread", None)


@needs_two_cpus
@pytest.mark.slow
def test_checkpoints_errors_and_order_across_the_switch(monkeypatch, caplog):
    measure_as(monkeypatch, serialized_by_the_gil)
    # Decide after three tasks, so every iterator the check makes switches early.
    monkeypatch.setattr(map_executor, "SOLO_TASKS", 1)
    monkeypatch.setattr(map_executor, "CONCURRENT_TASKS", 2)
    monkeypatch.setattr(map_executor, "CONCURRENT_SECONDS", 0.0)
    with caplog.at_level(logging.DEBUG, logger="feedline.placement.map_executor"):
        outcomes = check_checkpointing(auto_map(fl.Dataset.range(24), _busy_failing),
                                       epochs=1, steps=[0, 2, 9, 17, 24])
    assert len(outcomes) == 24
    assert [type(o).__name__ for o in outcomes].count("Failed") == 2
    assert any("processes" in r.message for r in caplog.records)


@needs_two_cpus
def test_no_process_is_left_after_close_mid_stream(monkeypatch):
    measure_as(monkeypatch, serialized_by_the_gil)
    it = iter(auto_map(fl.Dataset.range(10_000), _busy))
    for _ in range(60):
        next(it)
    assert it._root.executor_kind == "process"
    assert worker_processes()
    it.close()
    assert worker_processes() == []


# ---------------------------------------------------------------- the decision itself
MS = 1e-3


def _solo(n=2, transport=0.01 * MS):
    return [Probe(submitted=i * 10 * MS, start=i * 10 * MS, wall=10 * MS, cpu=10 * MS,
                  waited=0.0, elements=1, transport=transport, payload=0) for i in range(n)]


def _together(cores: int, n=8, base=1.0):
    # n tasks of 10 ms submitted at once on 2 workers; ``cores`` of them run at a time.
    return [Probe(submitted=base, start=base + (i // cores) * 10 * MS, wall=10 * MS,
                  cpu=10 * MS, waited=0.0, elements=1) for i in range(n)]


def _decide(solo, together, workers=2):
    """Solo tasks one at a time, then the others all submitted before the first ends."""
    choice = ExecutorChoice("map(f)", workers, abs)
    result = None
    for probe in solo:
        assert choice.may_submit(0) and choice.solo_phase()
        choice.submitted()
        result = choice.record(probe)
    for _ in together:
        choice.submitted()
    for probe in together:
        result = choice.record(probe)
    return result, choice.decision


def test_serialized_calls_with_idle_cpus_switch(monkeypatch):
    monkeypatch.setattr(map_executor, "schedulable_cpus", lambda: 2)
    result, decision = _decide(_solo(), _together(cores=1))
    assert result == "process" and decision.gil_share == pytest.approx(1.0)


def test_parallel_calls_stay_on_threads(monkeypatch):
    monkeypatch.setattr(map_executor, "schedulable_cpus", lambda: 2)
    result, decision = _decide(_solo(), _together(cores=2))
    assert result is None and decision.kind == "thread" and decision.gil_share < 0.2


def test_serialized_calls_on_a_busy_machine_stay_on_threads(monkeypatch):
    monkeypatch.setattr(map_executor, "schedulable_cpus", lambda: 2)
    monkeypatch.setattr(policy, "MIN_IDLE_CPUS", 0.5)
    monkeypatch.setattr(map_executor, "_idle_cpu_seconds", lambda: 100.0)  # none idle
    result, decision = _decide(_solo(), _together(cores=1))
    assert result is None and "idle" in decision.reason


def test_one_cpu_or_one_worker_stays_on_threads(monkeypatch):
    # Decided at once: nothing is measured (no task runs alone first).
    monkeypatch.setattr(map_executor, "schedulable_cpus", lambda: 1)
    choice = ExecutorChoice("map(f)", 2, abs)
    assert choice.decision.kind == "thread" and choice.may_submit(3)
    monkeypatch.setattr(map_executor, "schedulable_cpus", lambda: 2)
    choice = ExecutorChoice("map(f)", 1, abs)
    assert choice.decision.kind == "thread" and "1 worker" in choice.decision.reason


def test_cheap_calls_whose_transport_costs_more_stay_on_threads(monkeypatch):
    monkeypatch.setattr(map_executor, "schedulable_cpus", lambda: 2)
    monkeypatch.setattr(policy, "MAP_MIN_GAIN", 1.3)
    result, decision = _decide(_solo(transport=20 * MS), _together(cores=1))
    assert result is None and "cost more" in decision.reason


def test_cheap_calls_are_measured_together_only_for_their_overlap(monkeypatch):
    # 1 µs calls in tasks of 64, 20 µs to send each: the calls alone rule processes out,
    # so tasks together spanning THREADS_ONLY_SECONDS decide (their GIL share, where the
    # tuner starts the stage: inline), not CONCURRENT_SECONDS; the idle CPUs, over so short
    # a span, are not read. 10 ms calls still measure the whole span.
    monkeypatch.setattr(map_executor, "schedulable_cpus", lambda: 2)
    monkeypatch.setattr(map_executor, "CONCURRENT_SECONDS", 0.2)
    monkeypatch.setattr(map_executor, "THREADS_ONLY_SECONDS", 0.02)
    monkeypatch.setattr(policy, "MAP_MIN_GAIN", 1.3)
    cheap = [Probe(submitted=i * MS, start=i * MS, wall=64e-6, cpu=64e-6, waited=0.0,
                   elements=64, transport=64 * 20e-6, payload=0) for i in range(2)]
    # 400 tasks of 64 µs submitted at once, one running at a time: 26 ms.
    together = [Probe(submitted=1.0, start=1.0 + i * 64e-6, wall=64e-6, cpu=64e-6,
                      waited=0.0, elements=64) for i in range(400)]
    result, decision = _decide(cheap, together)
    assert result is None and decision is not None and decision.kind == "thread"
    assert decision.gil_share == pytest.approx(1.0) and decision.idle_cpus is None
    result, decision = _decide(_solo(), together)
    assert result is None and decision is None  # still measuring: 26 ms < 200 ms
    # Too short a span decides nothing, cheap or not.
    assert _decide(cheap, together[:100])[1] is None
    # Calls that ran alone cheap but together slow (10 ms a call): processes may pay
    # after all, so the whole span is measured.
    assert _decide(cheap, _together(cores=1, n=8))[1] is None


def test_unpicklable_function_stays_on_threads(monkeypatch):
    import threading

    monkeypatch.setattr(map_executor, "schedulable_cpus", lambda: 2)
    lock = threading.Lock()
    choice = ExecutorChoice("map(f)", 2, lambda x: lock)
    for probe in _solo() + _together(cores=1):
        assert choice.record(probe) is None
    assert "does not pickle" in choice.decision.reason


def test_calls_that_never_overlap_stay_on_threads(monkeypatch):
    monkeypatch.setattr(map_executor, "schedulable_cpus", lambda: 2)
    choice = ExecutorChoice("map(f)", 2, abs)
    # Each task submitted only once the previous one ended: the map is not the bottleneck.
    for i, probe in enumerate(_solo() + [
            Probe(submitted=1.0 + 2 * MS * i, start=1.0 + 2 * MS * i, wall=MS, cpu=MS,
                  waited=0.0, elements=1) for i in range(40)]):
        assert choice.record(probe) is None
    assert choice.decision.kind == "thread" and "rarely" in choice.decision.reason


@needs_two_cpus
def test_dataset_map_autotune_chooses(monkeypatch):
    measure_as(monkeypatch, serialized_by_the_gil)
    ds = fl.Dataset.range(80).map(_busy, num_parallel_calls=fl.AUTOTUNE)
    _, kind, decision = decision_of(ds, 80)
    assert kind == "process" and decision is not None
