"""RunningGate: at most ``limit`` tasks compute at once, and a changed limit applies; a
tuned map keeps work queued behind the running tasks while its consumer is away."""

from __future__ import annotations

import threading
import time

import feedline as fl
from feedline.execution.gate import RunningGate
from feedline.testing.threads import no_leaked_threads

TIMEOUT = 10


def _run_holders(gate: RunningGate, count: int, release: threading.Event) -> tuple[
        list[threading.Thread], list[int], threading.Semaphore]:
    """``count`` threads that each pass the gate and hold it until ``release``; returns
    them, the number of holders each saw on entry, and a semaphore released per entry."""
    seen: list[int] = []
    entered = threading.Semaphore(0)

    def hold() -> None:
        with gate:
            seen.append(gate.running)
            entered.release()
            assert release.wait(TIMEOUT)

    threads = [threading.Thread(target=hold, name=f"gate-test-{i}") for i in range(count)]
    for thread in threads:
        thread.start()
    return threads, seen, entered


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(TIMEOUT)
    assert not any(thread.is_alive() for thread in threads)


def test_at_most_limit_holders_then_more_when_the_limit_rises():
    gate = RunningGate(limit=1)
    release = threading.Event()
    threads, seen, entered = _run_holders(gate, 3, release)
    try:
        assert entered.acquire(timeout=TIMEOUT)
        assert not entered.acquire(timeout=0.2)  # the other two wait at the gate
        assert gate.running == 1
        gate.limit = 2
        assert entered.acquire(timeout=TIMEOUT)  # one more is let in at once
        assert not entered.acquire(timeout=0.2)
        assert gate.running == 2
    finally:
        release.set()
        _join(threads)
    assert seen[:2] == [1, 2]
    assert seen[2] in (1, 2)  # the third entered once one of the two had left
    assert gate.running == 0


def test_no_limit_lets_every_holder_in():
    gate = RunningGate()
    release = threading.Event()
    threads, seen, entered = _run_holders(gate, 4, release)
    try:
        for _ in range(4):
            assert entered.acquire(timeout=TIMEOUT)
        assert gate.running == 4
    finally:
        release.set()
        _join(threads)
    assert sorted(seen) == [1, 2, 3, 4]


def test_a_lower_limit_applies_as_running_holders_leave():
    gate = RunningGate(limit=2)
    first_release, second_release = threading.Event(), threading.Event()
    first, _, first_entered = _run_holders(gate, 2, first_release)
    later: list[threading.Thread] = []
    try:
        for _ in range(2):
            assert first_entered.acquire(timeout=TIMEOUT)
        gate.limit = 1
        later, seen, later_entered = _run_holders(gate, 1, second_release)
        first_release.set()
        _join(first)
        assert later_entered.acquire(timeout=TIMEOUT)
        assert seen == [1]
    finally:
        first_release.set()
        second_release.set()
        _join(first)
        _join(later)


def test_a_holder_that_raises_leaves_the_gate():
    gate = RunningGate(limit=1)
    try:
        with gate:
            raise ValueError("boom")
    except ValueError:
        pass
    assert gate.running == 0
    with gate:
        assert gate.running == 1


def test_a_tuned_map_computes_ahead_while_its_consumer_is_away():
    # The tuner's limit (one worker here) caps the tasks computing at once, not those
    # queued: while the consumer is away, the worker goes on through the queued window
    # instead of idling until the consumer submits more.
    lock = threading.Lock()
    state = {"running": 0, "most": 0, "done": 0}

    def work(x):
        with lock:
            state["running"] += 1
            state["most"] = max(state["most"], state["running"])
        time.sleep(0.05)
        with lock:
            state["running"] -= 1
            state["done"] += 1
        return x

    options = fl.Options(
        autotune=fl.AutotuneOptions(processes=False, choose_executor=False, tune=False),
        optimization=fl.OptimizationOptions(inject_prefetch=False),
        threading=fl.ThreadingOptions(max_parallelism=2))
    ds = fl.Dataset.range(20).map(work, num_parallel_calls=2).with_options(options)
    with no_leaked_threads(), iter(ds) as it:
        stage = it._root
        stage.tuned_workers = 1
        assert int(next(it)) == 0
        with lock:
            state["most"] = 0
            before = state["done"]
        time.sleep(0.5)  # the consumer is away
        with lock:
            computed_away = state["done"] - before
        assert [int(x) for x in it] == list(range(1, 20))
    # The task queued behind the running one ran meanwhile (capping tasks in flight
    # instead, none was: the one in flight had finished before next() returned).
    assert computed_away >= 1
    assert state["most"] == 1
