"""Where spare cores are few, AUTOTUNE tries a feeder process beside the training loop.

The trial alone cannot say whether a feeder pays on 2 cores: that depends on the training
loop. AUTOTUNE measures the loop on threads; if it does not wait on the pipeline, it starts a
feeder at the position of the last element delivered while the threads go on feeding, switches
once the feeder has caught up, measures the loop again, and keeps the faster (handing back to
the threads at the feeder's position otherwise). Output, errors and checkpoints are exactly
those of the threads-only run at every step.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import time

import numpy as np
import psutil
import pytest

import feedline as fl
from feedline.core.error_records import RestoredError
from feedline.placement import auto, policy
from feedline.placement.auto import AutoProcessesIterator, _FeederJoining
from feedline.placement.multiprocess import MultiprocessIterator
from feedline.testing import InjectedError, fail_at
from tests.placement.process_helpers import wait_gone
from tests.placement.test_auto import _two_files

pytestmark = pytest.mark.timeout(120)

TWO = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=2))
NEVER = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=2, processes=False))
LOOP_SECONDS = 0.01  # the simulated training step: the loop hardly waits on this pipeline


@pytest.fixture
def short_windows(monkeypatch):
    """Windows of a few elements; a trial that reports 1.0 of 2 cores busy (too few spare
    cores for the trial alone to choose a feeder: the decision is provisional); a feeder
    tried whatever the loop waited, memory plentiful, and never given up for being slow (a
    busy machine decides none of these: the tests that need another set it)."""
    monkeypatch.setattr(auto, "FEEDER_TRY_AFTER_SECONDS", 0.0)
    monkeypatch.setattr(auto, "WINDOW_SECONDS", 0.05)
    monkeypatch.setattr(auto, "WINDOW_ELEMENTS", 3)
    monkeypatch.setattr(auto, "FEEDER_CATCH_UP_SECONDS", 600.0)
    monkeypatch.setattr(auto, "FEEDER_CATCH_UP_CHECK_SECONDS", 600.0)
    monkeypatch.setattr(policy, "FEEDER_TRY_MAX_WAITED", 1.0)
    monkeypatch.setattr(auto, "_memory_figures", lambda: (1 << 30, 1 << 40))
    original = AutoProcessesIterator._trial

    def trial(self):
        original(self)
        return 1.0, False
    monkeypatch.setattr(AutoProcessesIterator, "_trial", trial)
    monkeypatch.setattr(_FeederJoining, "ready", _ready_once_made)


def _ready_once_made(joining: _FeederJoining) -> bool:
    """``_FeederJoining.ready`` that waits for the feeder's next element instead of saying
    it is not here yet: the feeder catches up with the threads at its first element however
    slowly it starts on a loaded machine (which otherwise decides whether it caught up before
    the data ended)."""
    joining.wait_started()
    moved = joining.moved
    while not moved.ready():  # a message that is no element (the start's) was taken
        moved._pool.receive([moved._next_worker], 60.0)
    return True


@pytest.fixture
def files(tmp_path) -> list[str]:
    return _two_files(tmp_path, 600)


def _slow_batch(batch: np.ndarray) -> np.ndarray:
    time.sleep(0.002)  # a pipeline the loop waits on
    return batch


def _pipeline(paths: list[str], options: fl.Options = TWO, fail: tuple[int, ...] = (),
              slow: bool = False) -> fl.Dataset:
    # Sharding by file would change this order: only a whole-pipeline feeder keeps it.
    ds = fl.Dataset.from_tensor_slices(paths).interleave(
        fl.TFRecordDataset, cycle_length=2, num_parallel_calls=2).shuffle(16, seed=5)
    if fail:
        ds = fail_at(ds, fail)
    ds = ds.batch(4)
    if slow:
        ds = ds.map(_slow_batch)
    return ds.prefetch(fl.AUTOTUNE).with_options(options)


def _outcomes(it, loop_seconds: float = LOOP_SECONDS, states_at: tuple[int, ...] = ()
              ) -> tuple[list, dict[int, dict]]:
    """Every outcome (a batch's records, or the error's type name), pausing like a training
    step after each; the pipeline's state after the outcomes ``states_at``."""
    outcomes, states = [], {}
    while True:
        try:
            outcomes.append(next(it).tolist())
        except StopIteration:
            return outcomes, states
        except InjectedError:
            outcomes.append("InjectedError")
        except RestoredError as error:
            # An error the feeder's start position held (a shuffle buffer's): the feeder
            # restored it from that position, as a checkpoint's restore does.
            assert error.original_type.endswith(".InjectedError"), error
            outcomes.append("InjectedError")
        if len(outcomes) in states_at:
            states[len(outcomes)] = it.state_dict()
        time.sleep(loop_seconds)
        joining = getattr(it._root, "_joining", None)
        if joining is not None:  # the feeder's start, however slow the machine, ends first
            concurrent.futures.wait([joining._started], timeout=60)


def _reference(paths: list[str], fail: tuple[int, ...] = ()) -> list:
    with iter(_pipeline(paths, NEVER, fail)) as it:
        return _outcomes(it, 0.0)[0]


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _root(it) -> AutoProcessesIterator:
    root = it._root
    assert isinstance(root, AutoProcessesIterator)
    return root


@pytest.mark.slow
def test_a_loop_that_hardly_waits_gets_a_feeder_in_the_same_order(files, short_windows,
                                                                    monkeypatch):
    monkeypatch.setattr(policy, "FEEDER_KEEP_SHARE", 0.0)  # the feeder is kept
    reference = _reference(files)
    before = _children()
    with iter(_pipeline(files)) as it:
        outcomes, _ = _outcomes(it)
        decision = it.process_decision
        assert isinstance(_root(it)._inner, MultiprocessIterator)
        started = _children() - before
    assert outcomes == reference
    assert (decision.mode, decision.workers, decision.provisional) == ("feeder", 1, False)
    assert "one feeder process, in its order (the training loop ran" in decision.reason
    assert "on threads and" in decision.reason and "from a feeder process" in decision.reason
    assert started and wait_gone(started, 10.0) == []


def test_a_loop_that_waits_on_the_pipeline_keeps_the_threads(files, short_windows,
                                                             monkeypatch):
    monkeypatch.setattr(policy, "FEEDER_TRY_MAX_WAITED", 0.5)
    reference = _reference(files)
    before = _children()
    with iter(_pipeline(files, slow=True)) as it:
        outcomes, _ = _outcomes(it, 0.0)
        decision = it.process_decision
        started = _children() - before
    assert outcomes == reference
    assert decision.mode == "threads" and not decision.provisional
    assert "the training loop waits on the pipeline on threads" in decision.reason
    assert started == set()  # no feeder was tried


@pytest.mark.slow
def test_a_slower_feeder_hands_back_to_the_threads_at_its_position(files, short_windows,
                                                                   monkeypatch):
    monkeypatch.setattr(policy, "FEEDER_KEEP_SHARE", float("inf"))  # never kept
    discarded: list[int | None] = []
    original = MultiprocessIterator.discard

    def discard(self):
        discarded.extend(self.worker_pids)
        original(self)
    monkeypatch.setattr(MultiprocessIterator, "discard", discard)
    reference = _reference(files)
    with iter(_pipeline(files)) as it:
        outcomes, _ = _outcomes(it)
        decision = it.process_decision
        assert not isinstance(_root(it)._inner, MultiprocessIterator)
        # Ended when handed back, not when the pipeline closes.
        assert len(discarded) == 1 and wait_gone(discarded, 10.0) == []
    assert outcomes == reference
    assert decision.mode == "threads" and "from a feeder process)" in decision.reason


@pytest.mark.slow
def test_a_feeder_that_never_catches_up_is_given_up(files, short_windows, monkeypatch):
    monkeypatch.setattr(auto, "FEEDER_CATCH_UP_SECONDS", 0.2)
    monkeypatch.setattr(_FeederJoining, "ready", lambda self: False)
    reference = _reference(files)
    before = _children()
    with iter(_pipeline(files)) as it:
        outcomes, _ = _outcomes(it)
        decision = it.process_decision
        started = _children() - before
    assert outcomes == reference
    assert decision.mode == "threads"
    assert decision.reason.endswith("was given up: it made no element in 0.2 s")
    assert wait_gone(started, 10.0) == []


@pytest.mark.slow
def test_a_feeder_whose_stage_cannot_go_on_while_catching_up_is_given_up(
        files, short_windows, monkeypatch):
    # An error marked fatal (a worker that cannot run its pipeline) is not an element's
    # error the threads delivered already: the feeder cannot take over, the threads go on.
    from feedline.core.error_records import mark_fatal

    monkeypatch.setattr(_FeederJoining, "ready", lambda self: True)
    monkeypatch.setattr(MultiprocessIterator, "__next__", lambda self: (_ for _ in ()).throw(
        mark_fatal(ValueError("the feeder cannot build its pipeline"))))
    reference = _reference(files)
    with iter(_pipeline(files)) as it:
        outcomes, _ = _outcomes(it)
        decision = it.process_decision
        assert not isinstance(_root(it)._inner, MultiprocessIterator)
    assert outcomes == reference
    assert decision.mode == "threads"
    assert decision.reason.endswith(
        "was given up: it failed: the feeder cannot build its pipeline")


@pytest.mark.slow
def test_errors_arrive_in_place_once_through_every_phase(files, short_windows, monkeypatch):
    monkeypatch.setattr(policy, "FEEDER_KEEP_SHARE", 0.0)
    fail = tuple(range(5, 1200, 97))  # before, during and after the feeder joins
    reference = _reference(files, fail)
    assert reference.count("InjectedError") == len(fail)
    with iter(_pipeline(files, fail=fail)) as it:
        outcomes, _ = _outcomes(it)
        assert it.process_decision.mode == "feeder"
    assert outcomes == reference


@pytest.mark.parametrize("keep", [0.0, float("inf")], ids=["kept", "handed-back"])
@pytest.mark.slow
def test_a_state_from_any_phase_restores_exactly_anywhere(files, short_windows, monkeypatch,
                                                          keep):
    monkeypatch.setattr(policy, "FEEDER_KEEP_SHARE", keep)
    reference = _reference(files)
    points = (2, 10, 40, 80, 120, 200, 280)
    with iter(_pipeline(files)) as it:
        outcomes, states = _outcomes(it, states_at=points)
    assert outcomes == reference
    for taken, state in states.items():
        for options in (NEVER, TWO):  # threads only, or AUTOTUNE again
            with iter(_pipeline(files, options)) as again:
                again.load_state_dict(state)
                assert _outcomes(again, 0.0)[0] == reference[taken:], (taken, options)


def test_closing_while_the_feeder_starts_ends_it(files, short_windows):
    before = _children()
    it = iter(_pipeline(files))
    while _root(it)._joining is None:
        next(it)
        time.sleep(LOOP_SECONDS)
    joining = _root(it)._joining
    it.close()
    assert _root(it)._joining is None
    assert joining.moved._pool is None  # discarded, not kept for a next epoch
    assert wait_gone(_children() - before, 10.0) == []


def test_a_window_counts_from_its_opening_after_the_elements_it_skips(monkeypatch):
    from feedline.placement.auto import _LoopWindow

    monkeypatch.setattr(auto, "WINDOW_SECONDS", 1.0)
    monkeypatch.setattr(auto, "WINDOW_ELEMENTS", 2)
    window = _LoopWindow(skip=1, opens=10.0)
    assert not window.took(0.0, 0.5)    # skipped
    assert not window.took(5.0, 5.5)    # before it opens: the start moves
    assert not window.took(9.0, 10.0)   # opens here
    assert not window.took(10.5, 10.6)  # one element, 0.1 s waited
    assert window.took(10.7, 11.0)      # two elements over 1.0 s: complete
    rate = window.rate()
    assert (rate.elements_per_second, round(rate.waited, 6)) == (2.0, 0.4)


def test_closing_before_a_slow_feeder_start_returns_ends_what_it_started(files, short_windows,
                                                                         monkeypatch):
    original = MultiprocessIterator._start

    def slow_start(self):
        time.sleep(0.5)  # the close below returns before this start does
        original(self)
    monkeypatch.setattr(MultiprocessIterator, "_start", slow_start)
    options = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=2),
                         threading=fl.ThreadingOptions(close_timeout=0.05))
    before = _children()
    it = iter(_pipeline(files, options))
    while _root(it)._joining is None:
        next(it)
        time.sleep(LOOP_SECONDS)
    joining = _root(it)._joining
    it.close()
    assert not joining._started.done()  # still starting when close() returned
    concurrent.futures.wait([joining._started], timeout=30)
    assert joining.moved._pool is None
    assert wait_gone(_children() - before, 10.0) == []


def test_no_feeder_is_tried_where_a_second_copy_may_not_fit_in_memory(files, short_windows,
                                                                      monkeypatch):
    monkeypatch.setattr(auto, "_memory_figures", lambda: (10 << 30, 12 << 30))
    reference = _reference(files)
    before = _children()
    with iter(_pipeline(files)) as it:
        outcomes, _ = _outcomes(it)
        decision = it.process_decision
        assert _children() - before == set()
    assert outcomes == reference
    assert (decision.mode, decision.provisional) == ("threads", False)
    assert decision.reason.endswith("could need up to 20.0 GiB (twice this process's 10.0 "
                                    "GiB), and 12.0 GiB are available")


# ------------------------------------------------------------------ epochs, order, restores
_PARENT = "FEEDLINE_FEEDER_TEST_PARENT_PID"


def _slow_in_parent(record):
    # Slow in the training loop's process only, every 5th record: the threads' unordered map
    # overtakes it there (one is nearly always in flight), while the feeder process (no sleep) keeps the input order.
    if os.environ.get(_PARENT) == str(os.getpid()) and int(record) % 10 == 0:
        time.sleep(0.03)
    return record


@pytest.fixture
def one_file(tmp_path) -> str:
    path = str(tmp_path / "one.tfrecord")
    fl.write_tfrecord(fl.Dataset.from_tensor_slices(
        np.array([b"%d" % i for i in range(4000)], dtype=object)), path)
    return path


def _unordered(path: str, options: fl.Options) -> fl.Dataset:
    # One file read whole by every worker would not pay: the pipeline may only move to one
    # feeder (sharding by batch needs a cheap source), even with deterministic=False.
    return (fl.TFRecordDataset(path).map(_slow_in_parent, num_parallel_calls=4,
                                          deterministic=False)
            .batch(4).prefetch(fl.AUTOTUNE)
            .with_options(options.merge(fl.Options(deterministic=False))))


@pytest.mark.slow
def test_an_unordered_pipeline_is_not_handed_to_a_feeder_at_a_position(one_file,
                                                                      short_windows,
                                                                      monkeypatch):
    # The feeder would drop its first `behind` elements as the ones the threads delivered:
    # under deterministic=False the two orders differ, so it is not tried.
    monkeypatch.setenv(_PARENT, str(os.getpid()))
    monkeypatch.setattr(policy, "FEEDER_KEEP_SHARE", 0.0)
    before = _children()
    with iter(_unordered(one_file, TWO)) as it:
        outcomes, _ = _outcomes(it, 0.004)
        decision = it.process_decision
        assert _children() - before == set()
    assert (decision.mode, decision.provisional) == ("threads", False), decision.reason
    counts = collections.Counter(int(r) for batch in outcomes for r in batch)
    lost = sorted(set(range(4000)) - set(counts))
    repeated = sorted(r for r, n in counts.items() if n > 1)
    # deterministic=False allows another order, never other elements.
    assert (lost, repeated) == ([], [])


def _repeated(paths: list[str], options: fl.Options) -> fl.Dataset:
    # Reshuffled each pass: repeat's second pass, and a second iter(), are later epochs.
    ds = fl.Dataset.from_tensor_slices(paths).interleave(
        fl.TFRecordDataset, cycle_length=2, num_parallel_calls=2).shuffle(16, seed=5)
    return ds.repeat(2).batch(4).prefetch(fl.AUTOTUNE).with_options(options)


@pytest.mark.slow
def test_a_kept_feeder_with_repeat_inside_leaves_the_next_epoch_s_order(files, short_windows,
                                                                        monkeypatch):
    monkeypatch.setattr(policy, "FEEDER_KEEP_SHARE", 0.0)  # the feeder is kept
    on_threads = _repeated(files, NEVER)
    reference = []
    for _ in range(2):
        with iter(on_threads) as it:
            reference.append([batch.tolist() for batch in it])
    ds = _repeated(files, TWO)
    epochs = []
    for _ in range(2):
        with iter(ds) as it:
            outcomes, _ = _outcomes(it, 0.005)
            assert it.process_decision.mode == "feeder", it.process_decision.reason
        epochs.append(outcomes)
    assert epochs[0] == reference[0]
    assert epochs[1] == reference[1]


@pytest.mark.slow
def test_the_decision_names_the_feeder_once_it_feeds_the_loop(files, short_windows,
                                                              monkeypatch):
    monkeypatch.setattr(auto, "FEEDER_SETTLE_ELEMENTS", 10**6)  # its window never opens
    with iter(_pipeline(files)) as it:
        outcomes, _ = _outcomes(it)
        running = _root(it)._inner
        decision = it.process_decision
    assert outcomes == _reference(files)
    assert isinstance(running, MultiprocessIterator)  # the feeder ran the pipeline to its end
    assert (decision.mode, decision.workers, decision.provisional) == ("feeder", 1, True)
    assert (decision.cpu_budget, decision.cores_busy) == (2, 1.0)  # the trial's figures


@pytest.mark.slow
def test_restoring_a_state_while_the_feeder_joins_continues_exactly_and_ends_it(
        files, short_windows, monkeypatch):
    # Untested before: load_state_dict on the iterator itself while a feeder is starting
    # beside the threads (the feeder is ended, the threads continue from the state).
    monkeypatch.setattr(policy, "FEEDER_KEEP_SHARE", 0.0)
    reference = _reference(files)
    before = _children()
    with iter(_pipeline(files)) as it:
        taken = []
        while _root(it)._joining is None:
            taken.append(next(it).tolist())
            time.sleep(0.01)
        state, at = it.state_dict(), len(taken)
        joining = _root(it)._joining
        for _ in range(3):
            next(it)
        it.load_state_dict(state)
        assert _root(it)._joining is None and joining.moved._pool is None
        rest, _ = _outcomes(it)
        assert not isinstance(_root(it)._inner, MultiprocessIterator)
    assert taken[:at] + rest == reference
    assert wait_gone(_children() - before, 10.0) == []
