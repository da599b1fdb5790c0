"""The one read-ahead mechanism, its executors and its positions, on their own."""

from __future__ import annotations

import threading

import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.execution.executor import Strand, ThreadExecutor
from feedline.execution.positions import PositionReader, PositionTracker, initial_position
from feedline.execution.read_ahead import BufferClosed, ReadAhead, SequentialReader
from feedline.testing import feedline_threads, no_leaked_threads

TIMEOUT = 30


def window(limit: int = 4, deterministic: bool = True, **kwargs) -> ReadAhead:
    return ReadAhead("test-stage", lambda: ThreadExecutor(limit, "test-stage", 0.1), limit=limit,
                     deterministic=deterministic, **kwargs)


@pytest.mark.timeout(TIMEOUT)
def test_results_come_back_in_submission_order_with_errors_in_place():
    with no_leaked_threads():
        calls = window()
        calls.submit("a", str.upper, "a")
        calls.add_failed("bad input", KeyError("input"))
        calls.submit("c", str.upper, "c")
        taken = [calls.take() for _ in range(3)]
        assert [tag for tag, _ in taken] == ["a", "bad input", "c"]
        assert taken[0][1].result() == "A" and isinstance(taken[1][1].exception(), KeyError)
        calls.shutdown()


@pytest.mark.timeout(TIMEOUT)
def test_not_deterministic_hands_out_the_finished_task_first():
    release = threading.Event()
    with no_leaked_threads():
        calls = window(deterministic=False)
        calls.submit("slow", release.wait)
        calls.submit("fast", int, "7")
        tag, future = calls.take()
        assert (tag, future.result()) == ("fast", 7)
        release.set()
        assert calls.take()[0] == "slow"
        calls.shutdown()


@pytest.mark.timeout(TIMEOUT)
def test_no_thread_starts_before_the_first_task():
    before = set(feedline_threads())
    calls = window()
    assert not calls.started and set(feedline_threads()) == before
    calls.shutdown()
    with pytest.raises(BufferClosed):
        calls.submit("late", int, "1")


@pytest.mark.timeout(TIMEOUT)
def test_shutdown_from_another_thread_wakes_a_waiting_take_and_is_idempotent():
    release, started = threading.Event(), threading.Event()
    outcome: list[str] = []

    def stuck() -> None:
        started.set()
        release.wait()

    with no_leaked_threads():
        calls = window()
        calls.submit("stuck", stuck)
        assert started.wait(TIMEOUT)  # running, not just queued (which shutdown cancels)

        def consume() -> None:
            try:
                calls.take()
            except BufferClosed:
                outcome.append("closed")

        consumer = threading.Thread(target=consume)
        consumer.start()
        try:
            with pytest.warns(RuntimeWarning, match="test-stage"):
                calls.shutdown()  # the task is stuck: abandoned after close_timeout
            calls.shutdown()
            consumer.join(TIMEOUT)
        finally:
            release.set()
    assert outcome == ["closed"]


@pytest.mark.timeout(TIMEOUT)
def test_element_timeout_keeps_the_task_in_place():
    release = threading.Event()
    with no_leaked_threads():
        calls = window(element_timeout=0.01, describe=lambda tag: f"element {tag}")
        calls.submit(5, release.wait)
        with pytest.raises(TimeoutError, match="test-stage: element 5 took longer"):
            calls.take()
        release.set()
        assert calls.take()[0] == 5
        calls.shutdown()


@pytest.mark.timeout(TIMEOUT)
def test_a_strand_runs_its_calls_one_at_a_time_in_order():
    order: list[int] = []
    with no_leaked_threads():
        pool = ThreadExecutor(4, "strand-test")
        strand = Strand(pool)
        futures = [strand.submit(order.append, i) for i in range(50)]
        for future in futures:
            future.result()
        strand.shutdown()
        pool.shutdown()
    assert order == list(range(50))


@pytest.mark.timeout(TIMEOUT)
def test_sequential_reader_state_is_a_position_and_restores_exactly():
    ctx = IteratorContext()
    dataset = fl.Dataset.range(100)
    with no_leaked_threads():
        reader = SequentialReader("doc", dataset._make_iterator(ctx),
                                  lambda: ThreadExecutor(1, "doc"), 8)
        taken = [int(reader.next()) for _ in range(13)]
        position = reader.position()
        reader.shutdown()
        assert position["next"] == 13 and position["at"] <= 13
        again = SequentialReader("doc", dataset._make_iterator(ctx),
                                 lambda: ThreadExecutor(1, "doc"), 8)
        again.restore(position)
        rest = []
        while True:
            try:
                rest.append(int(again.next()))
            except StopIteration:
                break
        again.shutdown()
    assert taken + rest == list(range(100))


def test_positions_skip_what_went_out_and_substitute_stored_errors():
    values = iter(range(10))
    reader = PositionReader(values.__next__, lambda: {"s": 0})
    # Saved with a snapshot before item 2, items 0-2 and 5 out (completion order), item 4 an
    # error pulled but not raised yet.
    reader.restore({"at": 2, "next": 3, "done": [5], "errors": [[4, {
        "type": "builtins.OSError", "kind": "OSError", "message": "gone", "notes": []}]],
        "input": {}})
    for _ in range(2):
        next(values)  # the caller loads the input at the snapshot: items 0, 1 consumed
    pulled = [reader.pull()[:3] for _ in range(3)]
    assert [p[0] for p in pulled] == [3, 4, 6]
    assert pulled[1][1] is True and isinstance(pulled[1][2], OSError)
    tracker = PositionTracker(initial_position({"s": 0}))
    for item in (1, 0):
        tracker.handed_out(item)
    assert tracker.next == 2 and tracker.done == set()


def test_a_tracker_keeps_only_the_snapshots_it_may_still_use():
    tracker = PositionTracker(initial_position({"s": 0}))
    for item in range(10_000):
        tracker.add_snapshot((item + 1, {"s": item + 1}))
        tracker.handed_out(item)
    assert len(tracker._snapshots) <= 2
    assert tracker.state([])["input"] == {"s": 10_000}


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("build", [
    lambda: fl.Dataset.range(10).prefetch(2),
    lambda: fl.Dataset.range(10).map(lambda x: x, num_parallel_calls=2),
    lambda: fl.Dataset.range(10).batch(2, num_parallel_calls=2),
    lambda: fl.Dataset.range(4).interleave(fl.Dataset.range, cycle_length=2,
                                           num_parallel_calls=2),
], ids=["prefetch", "parallel-map", "parallel-batch", "parallel-interleave"])
def test_read_ahead_stages_start_threads_on_the_first_next_only(build):
    with iter(build()) as it:
        next(it)
        state = it.state_dict()
    before = set(feedline_threads())
    with iter(build()) as it:
        it.load_state_dict(state)
        assert it.state_dict()["root"] == state["root"]
        assert set(feedline_threads()) <= before  # built, restored, saved: no thread yet


def test_a_huge_prefetch_buffer_is_filled_as_elements_arrive_not_allocated_up_front():
    # prefetch(10**12) ran out of memory making its futures before the first element.
    from feedline.execution.read_ahead import MAX_GROUPS_PER_READ

    with no_leaked_threads():
        it = iter(fl.Dataset.range(10).prefetch(10**12))
        assert [int(next(it)) for _ in range(3)] == [0, 1, 2]
        reader = it._root._reader
        assert len(reader.window._pending) <= MAX_GROUPS_PER_READ
        assert [int(x) for x in it] == list(range(3, 10))
        it.close()


@pytest.mark.timeout(TIMEOUT)
def test_discard_waits_for_the_running_read_only_never_for_cancelled_ones():
    # One task sets three futures; the consumer discards while it works on the first. The
    # two cancelled futures are never notified by the task (it stops at the first cancelled
    # one, or never runs): waiting for them hung a checkpoint restore in CI.
    started, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def read(futures, _):
        for future in futures:
            if not future.set_running_or_notify_cancel():
                finished.append("stopped")
                return
            started.set()
            release.wait(TIMEOUT)
            future.set_result("item")

    with no_leaked_threads():
        calls = window()
        calls.submit_reads(["a", "b", "c"], read, None)
        assert started.wait(TIMEOUT)
        threading.Timer(0.2, release.set).start()
        calls.discard(wait=True)  # returns once "a" is read, though "b" and "c" stay unset
        assert release.is_set() and calls.tags() == []
        calls.shutdown()
    assert finished == ["stopped"]


@pytest.mark.timeout(TIMEOUT)
def test_discard_with_wait_returns_when_the_task_never_ran():
    blocker, release = threading.Event(), threading.Event()
    with no_leaked_threads():
        calls = ReadAhead("test-stage", lambda: ThreadExecutor(1, "test-stage", 0.1), limit=4)
        calls.submit("busy", lambda: blocker.set() or release.wait(TIMEOUT))
        assert blocker.wait(TIMEOUT)
        calls.submit_reads(["x", "y", "z"], lambda futures, _: None, None)  # queued behind
        calls.discard(wait=False)  # drop "busy" from the window without waiting
        calls.submit_reads(["p", "q"], lambda futures, _: None, None)
        calls.discard(wait=True)  # the queued task has not started: nothing to wait for
        release.set()
        calls.shutdown()


def _record_file(tmp_path, count: int) -> str:
    path = str(tmp_path / "records.tfrecord")
    with fl.TFRecordWriter(path) as writer:
        for i in range(count):
            writer.write(b"%d" % i)
    return path


def _take(reader: SequentialReader, step: int) -> list[int]:
    """One step of a consumer that mixes the element and the chunk paths."""
    if step % 3 == 0:
        return [int(reader.next())]
    count = reader.elements_in_hand(7 * step % 40 + 1)
    if not count:
        return [int(reader.next())]
    return [int(v) for v in reader.take_elements(count)]


@pytest.mark.timeout(TIMEOUT)
def test_runs_of_a_chunk_source_hand_out_exactly_and_restore_at_every_step(tmp_path):
    # A file reader gives whole chunks: they travel as runs, taken whole, in slices, or one
    # element at a time; every position saved on the way restores to the same continuation.
    ctx = IteratorContext()
    dataset = fl.TFRecordDataset(_record_file(tmp_path, 3000))

    def reader() -> SequentialReader:
        return SequentialReader("doc", dataset._make_iterator(ctx),
                                lambda: ThreadExecutor(1, "doc"), 8, max_capacity=256)

    with no_leaked_threads():
        first = reader()
        taken: list[int] = []
        saved: list[tuple[int, dict]] = []
        step = 0
        with pytest.raises(StopIteration):
            while True:
                saved.append((len(taken), first.position()))
                taken += _take(first, step)
                step += 1
        first.shutdown()
        assert taken == list(range(3000))
        for done, position in saved[::25] + saved[-3:]:
            again = reader()
            again.restore(position)
            rest: list[int] = []
            with pytest.raises(StopIteration):
                while True:
                    rest += _take(again, len(rest))
            again.shutdown()
            assert rest == list(range(done, 3000)), done


@pytest.mark.timeout(TIMEOUT)
def test_a_run_entry_covers_a_chunk_and_carries_the_snapshot_after_its_last(tmp_path):
    from feedline.execution.positions import RUN

    ctx = IteratorContext()
    source = fl.TFRecordDataset(_record_file(tmp_path, 10))._make_iterator(ctx)
    reader = PositionReader(source.__next__, source.state_dict, True, source.next_chunk)
    first, tag, values, snapshot = reader.pull_many(4)[0]
    assert (first, tag, values) == (0, RUN, [b"0"]) and snapshot is not None  # interval 1
    reader._interval = 100
    first, tag, values, snapshot = reader.pull_many(4)[0]
    assert (first, tag, values, snapshot) == (1, RUN, [b"1", b"2", b"3", b"4"], None)
    source.close()
