"""AUTOTUNE's move to worker processes while the trial's elements are delivered: an unordered
move delivers every element once; a start that fails, a close before the start, or a worker that
cannot run its shard leaves the run to the threads, each element once, every process ended."""


from __future__ import annotations

import collections
import threading

import pytest

import feedline as fl
from feedline.placement import worker_loop
from feedline.placement.multiprocess import MultiprocessIterator
from tests.conftest import TRIAL_HELD as HELD
from tests.placement.process_helpers import wait_gone
from tests.placement.test_auto import _root
from tests.placement.test_auto_move import _start_threads


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_an_unordered_move_delivers_every_element_once(gil_bound_trial, spawned):
    # Options(deterministic=False) lets AUTOTUNE move a pipeline whose sharding changes the
    # order (a filter before the batch: each worker batches its own shard), and merges the
    # workers' elements as they come. The workers' first HELD batches are then not the
    # trial's (whichever worker made more of them, with this filter): dropping them as "the
    # same ones" lost some values and repeated others.
    options = fl.Options(deterministic=False, autotune=fl.AutotuneOptions(cpu_budget=2))
    ds = fl.Dataset.range(400).filter(lambda x: x % 2 == 0 or x % 7 == 0).batch(4) \
        .prefetch(fl.AUTOTUNE).with_options(options)
    with iter(ds) as it:
        values = [v for batch in it for v in batch.tolist()]
        root = _root(it)
        assert root.decision.mode == "processes"
        assert isinstance(root._inner, MultiprocessIterator)
    repeated = sorted(v for v, n in collections.Counter(values).items() if n > 1)
    assert repeated == []
    assert sorted(values) == [x for x in range(400) if x % 2 == 0 or x % 7 == 0]
    assert len(spawned) == 2 and wait_gone(spawned, 10) == []


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_a_forced_move_whose_start_fails_is_not_recorded_as_processes(monkeypatch, spawned):
    # processes=True starts the workers on the consumer's thread. The decision was recorded
    # before that start: when it failed, next() raised, and the run then went on on threads
    # while its decision said "processes".
    options = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=2, processes=True))
    ds = fl.Dataset.range(40).map(lambda x: x * 2).batch(4).prefetch(fl.AUTOTUNE) \
        .with_options(options)
    real = worker_loop.start_worker

    def no_processes(*args, **kwargs):
        raise OSError("no processes here")
    monkeypatch.setattr(worker_loop, "start_worker", no_processes)
    with iter(ds) as it:
        with pytest.raises(OSError, match="no processes here"):
            next(it)
        root = _root(it)
        assert root.decision is None or root.decision.mode == "threads"
        monkeypatch.setattr(worker_loop, "start_worker", real)
        taken = [b.tolist() for b in it]
        assert root.decision.mode == "processes"
        assert isinstance(root._inner, MultiprocessIterator)
        pids = root._inner.worker_pids
    assert taken == [[2 * x for x in range(i, i + 4)] for i in range(0, 40, 4)]
    assert wait_gone(pids, 10) == []


@pytest.mark.timeout(120)
def test_closing_before_the_start_thread_starts_the_workers_starts_none(
        gil_bound_trial, monkeypatch, spawned):
    # close() waits close_timeout for the workers' start, then discards them. A start
    # thread that had not yet reached the pool then made a new one and started its
    # processes after close() returned (ended only when the start returned).
    reached = threading.Event()
    release = threading.Event()
    original = MultiprocessIterator._start

    def gated(self):
        if not self._running:
            reached.set()
            release.wait(10)
        original(self)
    monkeypatch.setattr(MultiprocessIterator, "_start", gated)
    options = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=2),
                         threading=fl.ThreadingOptions(close_timeout=0.1))
    ds = fl.Dataset.range(400).map(lambda x: x * 2).batch(4).prefetch(fl.AUTOTUNE) \
        .with_options(options)
    it = iter(ds)
    next(it)
    assert _root(it)._moving is not None
    assert reached.wait(10)
    it.close()
    release.set()
    for thread in _start_threads():
        thread.join(10)
    assert _start_threads() == []
    assert spawned == []


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_a_worker_that_cannot_run_its_shard_while_catching_up_leaves_the_run_to_the_threads(
        gil_bound_trial, monkeypatch, spawned):
    # A worker that cannot build its pipeline sends a fatal error: the stage raises it
    # (marked fatal) and ends. Catching up took it for an element's error the threads had
    # delivered; at the last element to drop, the processes then fed the loop, and the run
    # ended silently after the trial's elements.
    from feedline.core.error_records import mark_fatal
    from feedline.core.errors import WorkerProcessError

    real_next = MultiprocessIterator.__next__
    calls = [0]

    def fatal_at_the_last_to_drop(self):
        calls[0] += 1
        if calls[0] == HELD:
            self._broken = WorkerProcessError("worker 5 cannot run its shard", worker=5)
            raise mark_fatal(ValueError("worker 5 cannot build its pipeline"))
        return real_next(self)
    monkeypatch.setattr(MultiprocessIterator, "__next__", fatal_at_the_last_to_drop)
    ds = fl.Dataset.range(400).map(lambda x: x * 2).batch(4).prefetch(fl.AUTOTUNE) \
        .with_options(fl.Options(autotune=fl.AutotuneOptions(cpu_budget=2)))
    with iter(ds) as it:
        taken = [next(it).tolist() for _ in range(HELD)]
        moving = _root(it)._moving
        assert moving is not None
        taken += [b.tolist() for b in it]
        decision = _root(it).decision
    assert taken == [[2 * x for x in range(i, i + 4)] for i in range(0, 400, 4)]
    assert (decision.mode, decision.workers) == ("threads", 0)
    assert "worker 5 cannot build its pipeline" in decision.reason  # the workers' error
    assert len(spawned) == 2 and wait_gone(spawned, 10) == []


@pytest.mark.timeout(120)
def test_an_unordered_move_whose_start_fails_delivers_the_trials_elements_on_threads(
        gil_bound_trial, monkeypatch):
    # Where the processes start at once (an unordered move), a failed start leaves the run
    # to the threads, the trial's elements first, as a failed start beside them does.
    def no_processes(*args, **kwargs):
        raise OSError("no processes here")
    monkeypatch.setattr(worker_loop, "start_worker", no_processes)
    options = fl.Options(deterministic=False, autotune=fl.AutotuneOptions(cpu_budget=2))
    ds = fl.Dataset.range(400).filter(lambda x: x % 3 != 1).batch(4) \
        .prefetch(fl.AUTOTUNE).with_options(options)
    with iter(ds) as it:
        values = [v for batch in it for v in batch.tolist()]
        decision = _root(it).decision
        assert not isinstance(_root(it)._inner, MultiprocessIterator)
    assert sorted(values) == [x for x in range(400) if x % 3 != 1]
    assert (decision.mode, decision.workers) == ("threads", 0)
    assert "no processes here" in decision.reason  # the start's error
