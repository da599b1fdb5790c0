"""WorkerGate: at most ``limit`` threads of a pool take work at once, a changed limit
applies, and a worker keeps its place across tasks (one place: one thread runs every task,
as a pool of one would); a tuned map keeps work queued while its consumer is away."""

from __future__ import annotations

import threading
import time

import pytest

import feedline as fl
from feedline.execution.executor import ThreadExecutor
from feedline.execution.gate import WorkerGate
from feedline.testing.threads import no_leaked_threads

TIMEOUT = 10


def _run_holders(gate: WorkerGate, count: int, release: threading.Event) -> tuple[
        list[threading.Thread], list[int], threading.Semaphore]:
    """``count`` threads that each take a place and hold it until ``release``; returns
    them, the number of places held each saw on entry, and a semaphore released per entry."""
    seen: list[int] = []
    entered = threading.Semaphore(0)

    def hold() -> None:
        gate.enter()
        try:
            seen.append(gate.active)
            entered.release()
            assert release.wait(TIMEOUT)
        finally:
            gate.leave()

    threads = [threading.Thread(target=hold, name=f"gate-test-{i}") for i in range(count)]
    for thread in threads:
        thread.start()
    return threads, seen, entered


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(TIMEOUT)
    assert not any(thread.is_alive() for thread in threads)


def test_at_most_limit_holders_then_more_when_the_limit_rises():
    gate = WorkerGate(limit=1)
    release = threading.Event()
    threads, seen, entered = _run_holders(gate, 3, release)
    try:
        assert entered.acquire(timeout=TIMEOUT)
        assert not entered.acquire(timeout=0.2)  # the other two wait at the gate
        assert gate.active == 1
        gate.limit = 2
        assert entered.acquire(timeout=TIMEOUT)  # one more is let in at once
        assert not entered.acquire(timeout=0.2)
        assert gate.active == 2
    finally:
        release.set()
        _join(threads)
    assert seen[:2] == [1, 2]
    assert seen[2] in (1, 2)  # the third entered once one of the two had left
    assert gate.active == 0


def test_no_limit_lets_every_holder_in():
    gate = WorkerGate()
    release = threading.Event()
    threads, seen, entered = _run_holders(gate, 4, release)
    try:
        for _ in range(4):
            assert entered.acquire(timeout=TIMEOUT)
        assert gate.active == 4
    finally:
        release.set()
        _join(threads)
    assert sorted(seen) == [1, 2, 3, 4]


def test_a_place_is_given_back_only_above_the_limit():
    gate = WorkerGate(limit=2)
    gate.enter()
    gate.enter()
    assert not gate.leave_if_over()  # two places, limit two: both kept
    gate.limit = 1
    assert gate.leave_if_over()  # the first to finish a task gives its place back
    assert not gate.leave_if_over()  # the second keeps its place
    assert gate.active == 1
    gate.limit = None
    gate.enter()
    assert not gate.leave_if_over()  # no limit: never
    assert gate.active == 2


def test_close_lets_every_waiting_thread_in():
    gate = WorkerGate(limit=1)
    gate.enter()
    release = threading.Event()
    release.set()
    threads, seen, entered = _run_holders(gate, 2, release)
    assert not entered.acquire(timeout=0.2)
    gate.close()
    _join(threads)
    assert len(seen) == 2
    gate.limit = 1  # a limit set after closing keeps nobody out
    gate.enter()
    gate.enter()
    assert gate.active == 3


def test_one_place_runs_every_task_on_one_thread():
    # Gating each task instead, the second task queued would be taken by a second thread
    # that waits for the first to finish: a hand-off between threads per task.
    gate = WorkerGate(limit=1)
    pool = ThreadExecutor(4, "gate-test", gate=gate)
    with no_leaked_threads():
        try:
            futures = [pool.submit(lambda: threading.current_thread().name) for _ in range(20)]
            names = {future.result(timeout=TIMEOUT) for future in futures}
            assert len(names) == 1
            assert len(pool.threads()) == 1  # threads start up to the limit only
        finally:
            pool.shutdown()


def _sleep_counted(lock: threading.Lock, state: dict[str, int]) -> None:
    """Sleeps 50 ms, counting in ``state`` the calls running (the most at once) and done."""
    with lock:
        state["running"] += 1
        state["most"] = max(state["most"], state["running"])
    time.sleep(0.05)
    with lock:
        state["running"] -= 1
        state["done"] += 1


def _running_together(pool: ThreadExecutor, tasks: int, expected: int | None = None) -> int:
    """The most of ``tasks`` sleeping tasks that ran at once on ``pool``.

    With ``expected``, each task also waits until that many run at once (or ``TIMEOUT``
    passes) before its sleep: on a loaded machine starting hundreds of threads takes longer
    than one sleep, and the count would depend on the machine's speed, not the pool's limit.
    """
    lock = threading.Lock()
    state = {"running": 0, "most": 0, "done": 0}
    reached = threading.Event()

    def task() -> None:
        with lock:
            state["running"] += 1
            state["most"] = max(state["most"], state["running"])
            if expected is not None and state["running"] >= expected:
                reached.set()
        if expected is not None:
            reached.wait(TIMEOUT)
        time.sleep(0.05)
        with lock:
            state["running"] -= 1
            state["done"] += 1

    for future in [pool.submit(task) for _ in range(tasks)]:
        future.result(timeout=TIMEOUT)
    return state["most"]


def test_a_changed_limit_applies_to_a_running_pool_and_threads_past_it_end():
    gate = WorkerGate(limit=1)
    pool = ThreadExecutor(3, "gate-test", gate=gate)
    with no_leaked_threads():
        try:
            assert _running_together(pool, 4, 1) == 1
            gate.limit = 3
            assert _running_together(pool, 6, 3) == 3
            started = pool.threads()
            gate.limit = 1  # applies as the running tasks end
            _running_together(pool, 3)
            assert _running_together(pool, 4, 1) == 1
            # The two threads past the limit ended once their call returned, rather than
            # wait at the gate for good.
            (kept,) = pool.threads()
            for thread in started:
                if thread is not kept:
                    thread.join(TIMEOUT)
                    assert not thread.is_alive()
            gate.limit = 3  # threads start again as calls need them
            assert _running_together(pool, 6, 3) == 3
            assert len(pool.threads()) == 3
        finally:
            pool.shutdown()


def test_a_tuned_map_computes_ahead_while_its_consumer_is_away():
    # The tuner's limit (one worker here) caps the threads computing at once, not the tasks
    # queued: while the consumer is away, the worker goes on through the queued window
    # instead of idling until the consumer submits more.
    lock = threading.Lock()
    state = {"running": 0, "most": 0, "done": 0}

    def work(x):
        _sleep_counted(lock, state)
        return x

    options = fl.Options(
        autotune=fl.AutotuneOptions(processes=False, choose_executor=False, tune=False),
        optimization=fl.OptimizationOptions(inject_prefetch=False),
        threading=fl.ThreadingOptions(max_parallelism=2))
    ds = fl.Dataset.range(20).map(work, num_parallel_calls=2).with_options(options)
    with no_leaked_threads(), iter(ds) as it:
        stage = it._root
        stage.knobs.tuned_workers = 1
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


def test_shutdown_ends_the_threads_waiting_for_a_place_while_a_call_is_stuck():
    # Limit one, one call that does not return: the other threads wait for a place. Shutting
    # down abandons the stuck one (with a warning) and ends the waiting ones at once.
    gate = WorkerGate(limit=3)
    pool = ThreadExecutor(3, "gate-test", close_timeout=0.2, gate=gate)
    release = threading.Event()
    try:
        assert _running_together(pool, 3, 3) == 3  # three threads started
        gate.limit = 1
        _running_together(pool, 3)  # two of them now wait for a place
        stuck = pool.submit(release.wait, TIMEOUT)
        time.sleep(0.05)
        waiting = [t for t in pool.threads() if t.is_alive()]
        with pytest.warns(RuntimeWarning, match="abandoned 1 daemon thread"):
            pool.shutdown()
        assert sum(t.is_alive() for t in waiting) == 1  # only the stuck call's thread
    finally:
        release.set()
    assert stuck.result(timeout=TIMEOUT) is True
    for thread in pool.threads():
        thread.join(TIMEOUT)
        assert not thread.is_alive()


def test_a_raised_limit_starts_the_threads_it_allows_after_a_long_run_at_the_old_one():
    # A pool that ran many calls queued behind its one busy thread, then is let run 8 at
    # once, starts 8 threads. (Counting a permit per finished call as idle threads, these
    # piled up while the thread was busy, and later calls started no thread.)
    gate = WorkerGate(limit=1)
    pool = ThreadExecutor(16, "gate-test", gate=gate)
    with no_leaked_threads():
        try:
            for future in [pool.submit(time.sleep, 0.001) for _ in range(50)]:
                future.result(timeout=TIMEOUT)
            assert len(pool.threads()) == 1
            gate.limit = 8
            assert _running_together(pool, 16, 8) == 8
            assert len(pool.threads()) == 8
        finally:
            pool.shutdown()


def test_a_pool_grows_to_hundreds_of_threads_and_ends_them_all_on_shutdown():
    # Calls that wait (a sleep, a read) are what a tuned map runs on hundreds of threads.
    gate = WorkerGate(limit=4)
    pool = ThreadExecutor(256, "gate-test", gate=gate)
    with no_leaked_threads(timeout=TIMEOUT):
        try:
            assert _running_together(pool, 8, 4) == 4
            gate.limit = 200
            assert _running_together(pool, 400, 200) == 200
            assert len(pool.threads()) == 200
            assert pool.workers == 200
            gate.limit = 300
            assert pool.workers == 256  # never more than the pool's threads
        finally:
            pool.shutdown()
        assert not any(thread.is_alive() for thread in pool.threads())
