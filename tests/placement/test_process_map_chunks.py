"""``map(executor="process")`` with tasks of many elements (issue 25): results, order, errors,
worker deaths and checkpoints exactly those of the element-by-element path."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

import numpy as np
import pytest
from process_helpers import feedline_mappings, worker_processes

import feedline as fl
from feedline.core.error_records import is_fatal
from feedline.placement import process_executor
from feedline.placement import runner as runner_module
from feedline.placement.chunks import ChunkRunner
from feedline.placement.process_executor import ProcessExecutor
from feedline.testing import check_checkpointing

N = 3000


def _ids(x):
    """Cheap, GIL-bound, an array of one dtype and shape per element (stacked on the way back)."""
    total = 0
    for i in range(20):
        total += (int(x) * 31 + i) % 7
    return np.array([int(x), total, -int(x)], dtype=np.int32)


def _scalar(x):
    return int(x) * 3


def _ragged(x):
    """Arrays of several shapes, tuples, bytes: nothing to stack (one dtype per component:
    a dataset's dtypes are fixed, as in tf.data)."""
    x = int(x)
    if x % 3 == 0:
        return np.arange(x % 5, dtype=np.int64)
    if x % 3 == 1:
        return (np.float32(x), b"b%d" % x)
    return np.full((2, 2), x, dtype=np.int64)


def _fails_at(*bad):
    def f(x):
        if int(x) in bad:
            raise ValueError(f"bad element {int(x)}")
        return _ids(x)

    return f


def _sigkills_itself_at(index):
    def f(x):
        if int(x) == index:
            os.kill(os.getpid(), signal.SIGKILL)
        return _ids(x)

    return f


def _waits_at(index, marker):
    """Element ``index`` waits (until its worker is killed) the first time it runs."""

    def f(x):
        if int(x) == index and not os.path.exists(marker):
            with open(marker + ".tmp", "w") as out:
                out.write(str(os.getpid()))
            os.rename(marker + ".tmp", marker)
            time.sleep(600)
        return _ids(x)

    return f


def _outcomes(it) -> list:
    """Every outcome until the end: values (as lists), and the exceptions raised."""
    out: list = []
    while True:
        try:
            value = next(it)
        except StopIteration:
            return out
        except Exception as error:  # noqa: BLE001 - recorded in its place
            out.append(error)
        else:
            out.append(value.tolist() if isinstance(value, np.ndarray) else value)


class _TaskSizes:
    """Records the elements of every task a process executor receives."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sizes: list[int] = []
        original = ProcessExecutor.submit

        def submit(executor, fn, *args):
            if isinstance(fn, ChunkRunner) and args and args[0]:
                self.sizes.append(len(args[0]))
            return original(executor, fn, *args)

        monkeypatch.setattr(ProcessExecutor, "submit", submit)


@pytest.fixture(autouse=True)
def _workers_end():
    """Every worker process has exited once a test's pipelines are done, and no shared
    memory of the transport stays mapped."""
    yield
    import gc

    gc.collect()
    assert worker_processes() == []
    assert feedline_mappings() == []


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fn", [_ids, _scalar, _ragged], ids=["stacked", "scalar", "ragged"])
def test_tasks_carry_chunks_and_the_results_are_the_inline_maps(fn, monkeypatch):
    tasks = _TaskSizes(monkeypatch)
    inline = list(fl.Dataset.range(N).map(fn))
    ds = fl.Dataset.range(N).map(fn, num_parallel_calls=2, executor="process")
    with iter(ds) as it:
        out = list(it)
    assert len(out) == N
    for got, want in zip(out, inline):
        assert type(got) is type(want)
        if isinstance(want, np.ndarray):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.flags.writeable
            np.testing.assert_array_equal(got, want)
        elif isinstance(want, tuple):
            assert [type(v) for v in got] == [type(v) for v in want] and got == want
        else:
            assert got == want
    assert sum(tasks.sizes) == N
    assert max(tasks.sizes) > 1 and len(tasks.sizes) < N / 4  # most tasks carried many


@pytest.mark.timeout(120)
def test_deterministic_false_gives_the_same_elements():
    ds = fl.Dataset.range(N).map(_ids, num_parallel_calls=2, executor="process",
                                 deterministic=False)
    assert sorted(int(x[0]) for x in ds) == list(range(N))


@pytest.mark.timeout(120)
def test_results_of_a_process_map_may_be_updated_in_place_downstream():
    # Small results travel inside the message, large ones in shared memory: both writable.
    def double_in_place(a):
        a *= 2
        return a

    for size in (3, 40_000):
        ds = (fl.Dataset.range(200)
              .map(lambda x, n=size: np.full(n, x, np.int64), num_parallel_calls=2,
                   executor="process")
              .map(double_in_place))
        assert [int(a[0]) for a in ds] == [2 * x for x in range(200)]


@pytest.mark.timeout(120)
def test_a_failing_element_inside_a_chunk_raises_at_its_index_and_the_iteration_goes_on(
        monkeypatch):
    tasks = _TaskSizes(monkeypatch)
    fn = _fails_at(5, 1777, 1778, 2999)
    with iter(fl.Dataset.range(N).map(fn)) as it:
        expected = _outcomes(it)
    ds = fl.Dataset.range(N).map(fn, num_parallel_calls=2, executor="process")
    with iter(ds) as it:
        got = _outcomes(it)
    assert max(tasks.sizes) > 1
    assert len(got) == len(expected) == N
    for index, (g, e) in enumerate(zip(got, expected)):
        if isinstance(e, Exception):
            assert type(g) is type(e) and str(g) == str(e) == f"bad element {index}"
            assert g.__notes__[-1] == e.__notes__[-1] == \
                f"feedline: raised in map(_fails_at.<locals>.f) at input element {index}"
            assert not is_fatal(g)
        else:
            assert g == e, index


@pytest.mark.timeout(120)
def test_an_element_that_sigkills_its_worker_inside_a_chunk_fails_alone_in_its_place(
        monkeypatch):
    tasks = _TaskSizes(monkeypatch)
    ds = fl.Dataset.range(N).map(_sigkills_itself_at(2100), num_parallel_calls=2,
                                 executor="process")
    with iter(ds) as it:
        got = _outcomes(it)
    assert max(tasks.sizes) > 1
    failure = got[2100]
    assert isinstance(failure, fl.WorkerProcessError) and not is_fatal(failure)
    assert "the worker process (pid" in str(failure)
    assert "running this call was killed by signal SIGKILL" in str(failure)
    assert failure.__notes__[-1] == \
        "feedline: raised in map(_sigkills_itself_at.<locals>.f) at input element 2100"
    # Nothing lost, nothing twice: the chunk ran again one element per call.
    assert got[:2100] + got[2101:] == [_ids(x).tolist() for x in range(N) if x != 2100]


@pytest.mark.timeout(120)
def test_a_worker_sigkilled_in_the_middle_of_a_chunk_loses_and_repeats_nothing(
        tmp_path, monkeypatch):
    # The killed worker's chunk runs again one element per call (none of them kills its
    # worker this time), and the chunk sent ahead to it goes back to the queue.
    tasks = _TaskSizes(monkeypatch)
    marker = str(tmp_path / "pid")
    killed: list[int] = []

    def kill_when_waiting() -> None:
        deadline = time.monotonic() + 60
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.01)
        pid = int(open(marker).read())
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    killer = threading.Thread(target=kill_when_waiting, daemon=True)
    killer.start()
    ds = fl.Dataset.range(N).map(_waits_at(2200, marker), num_parallel_calls=2,
                                 executor="process")
    with iter(ds) as it:
        got = _outcomes(it)
        pool = it._root._window._executor
        started = pool.statistics().workers_started
    killer.join(60)
    assert not killer.is_alive() and killed
    assert max(tasks.sizes) > 1
    assert got == [_ids(x).tolist() for x in range(N)]
    assert started == 3  # the two, and the one that replaced the killed worker


def _restore_and_finish(ds: fl.Dataset, state) -> list:
    with iter(ds) as it:
        it.load_state_dict(state)
        return _outcomes(it)


def _state_after(ds: fl.Dataset, steps: int) -> tuple[dict, list]:
    with iter(ds) as it:
        taken = [next(it).tolist() for _ in range(steps)]
        state = json.loads(json.dumps(it.state_dict()))
    return state, taken


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("saved_chunked", [True, False], ids=["chunked->one-by-one",
                                                              "one-by-one->chunked"])
def test_a_state_saved_with_chunks_restores_without_them_and_the_other_way(
        saved_chunked, monkeypatch):
    # "One by one": tasks of one element each (MAX_PROCESS_CHUNK = 1), as before chunks.
    fn = _fails_at(1500)
    with iter(fl.Dataset.range(N).map(fn)) as it:
        reference = [_comparable(o) for o in _outcomes(it)]

    def process_map() -> fl.Dataset:
        return fl.Dataset.range(N).map(fn, num_parallel_calls=2, executor="process")

    tasks = _TaskSizes(monkeypatch)
    one_by_one = pytest.MonkeyPatch()
    try:
        for step in (0, 1, 1400, 1500, 2600, N):
            if not saved_chunked:
                one_by_one.setattr(runner_module, "MAX_PROCESS_CHUNK", 1)
            tasks.sizes.clear()
            with iter(process_map()) as it:
                taken = [_comparable(_next_outcome(it)) for _ in range(step)]
                state = json.loads(json.dumps(it.state_dict()))
            saved_sizes = list(tasks.sizes)
            one_by_one.undo()
            if saved_chunked:
                one_by_one.setattr(runner_module, "MAX_PROCESS_CHUNK", 1)
            tasks.sizes.clear()
            rest = [_comparable(o) for o in _restore_and_finish(process_map(), state)]
            restored_sizes = list(tasks.sizes)
            one_by_one.undo()
            assert taken + rest == reference, step
            # And into the inline map, whose state has the same layout.
            inline = _restore_and_finish(fl.Dataset.range(N).map(fn), state)
            assert taken + [_comparable(o) for o in inline] == reference, step
            if step >= 1400:
                assert (max(saved_sizes) > 1) == saved_chunked
            if step <= 1500:
                assert (max(restored_sizes) > 1) != saved_chunked
    finally:
        one_by_one.undo()


def _next_outcome(it):
    try:
        value = next(it)
    except Exception as error:  # noqa: BLE001 - recorded in its place
        return error
    return value.tolist()


def _comparable(outcome):
    """An outcome with an error as its type and text (exceptions compare by identity)."""
    if isinstance(outcome, BaseException):
        return ("error", type(outcome).__name__, str(outcome))
    return outcome


@pytest.mark.timeout(120)
def test_states_of_the_chunked_path_have_the_element_by_element_paths_positions(
        monkeypatch):
    # The same positions (handed out, done, errors); only where the input was last
    # snapshotted may differ, as it does between two runs of either path.
    fn = _fails_at(700)

    def states() -> list[dict]:
        out = []
        with iter(fl.Dataset.range(N).map(fn, num_parallel_calls=2,
                                          executor="process")) as it:
            for step in range(1, 1200):
                _next_outcome(it)
                if step in (1, 699, 700, 701, 1100):
                    out.append(json.loads(json.dumps(it.state_dict())))
        return out

    chunked = states()
    monkeypatch.setattr(runner_module, "MAX_PROCESS_CHUNK", 1)
    unchunked = states()
    for a, b in zip(chunked, unchunked, strict=True):
        assert a.keys() == b.keys()
        pa, pb = _position(a), _position(b)
        assert {k: pa[k] for k in ("next", "done", "errors")} == \
            {k: pb[k] for k in ("next", "done", "errors")}
        assert pa["at"] <= pa["next"] and pb["at"] <= pb["next"]


def _position(state: dict) -> dict:
    """The map stage's position inside a pipeline state."""
    found = []

    def visit(node):
        if isinstance(node, dict):
            if {"at", "next", "done", "errors", "input"} <= node.keys():
                found.append(node)
            for value in node.values():
                visit(value)

    visit(state)
    assert found, state
    return found[0]


@pytest.mark.timeout(120)
def test_check_checkpointing_with_chunks_and_an_inline_variant():
    fn = _fails_at(1300)
    ds = fl.Dataset.range(1600).map(fn, num_parallel_calls=2, executor="process")
    check_checkpointing(ds, epochs=1, steps=[0, 1, 1299, 1300, 1301, 1600],
                        variants=[fl.Dataset.range(1600).map(fn)])


def _slowly(count: int):
    def gen():
        for i in range(count):
            time.sleep(0.003)  # never shorter: each pull takes >= 3 ms
            yield i

    return gen


@pytest.mark.timeout(120)
def test_a_slow_input_is_never_held_back_to_fill_a_chunk(monkeypatch):
    # Each element takes >= 3 ms to arrive, past MAX_FILL_SECONDS: a chunk stops at its
    # second element at the latest, and at its first once the input's pace is measured.
    tasks = _TaskSizes(monkeypatch)
    ds = (fl.Dataset.from_generator(_slowly(120), output_signature=fl.TensorSpec((), np.int64))
          .map(_ids, num_parallel_calls=2, executor="process"))
    assert [int(x[0]) for x in ds] == list(range(120))
    assert max(tasks.sizes) <= 2 and tasks.sizes[-10:] == [1] * 10


def _modules_loaded():
    # A closure: it travels by value, without importing this test module (and what it
    # imports) in the worker.
    def f(x):
        return (int(x), "feedline.datasets" in sys.modules,
                "feedline.formats.tfrecord" in sys.modules)

    return f


def _uses_the_public_names(x):
    return int(next(iter(fl.Dataset.range(int(x), int(x) + 1).map(lambda v: v * 10))))


@pytest.mark.timeout(120)
def test_workers_load_feedline_on_first_use_of_its_public_names():
    # Imported whole, the package cost each worker ~0.4 s before its first call.
    ds = fl.Dataset.range(3).map(_modules_loaded(), num_parallel_calls=1, executor="process")
    assert [(int(i), bool(a), bool(b)) for i, a, b in ds] == \
        [(0, False, False), (1, False, False), (2, False, False)]
    ds = fl.Dataset.range(4).map(_uses_the_public_names, num_parallel_calls=2,
                                 executor="process")
    assert [int(x) for x in ds] == [0, 10, 20, 30]


def _sleeps(seconds):
    def f(x):
        time.sleep(seconds)
        return int(x)

    return f


@pytest.mark.timeout(120)
def test_only_short_calls_are_sent_ahead_to_a_busy_worker():
    executor = ProcessExecutor(2, "ahead")
    try:
        # Sleeps: a call never takes less than its sleep (the long one is past the bound).
        short, long_ = _sleeps(0.01), _sleeps(process_executor.PIPELINE_SECONDS * 2)
        assert [f.result() for f in [executor.submit(short, i) for i in range(20)]] == \
            list(range(20))
        assert [f.result() for f in [executor.submit(long_, i) for i in range(4)]] == \
            list(range(4))
        futures = [executor.submit(short, i) for i in range(8)]
        with executor._lock:
            ahead_short = max(len(w.calls) for w in executor._workers)
        [f.result() for f in futures]
        futures = [executor.submit(long_, i) for i in range(6)]
        with executor._lock:
            ahead_long = max(len(w.calls) for w in executor._workers)
            queued_long = len(executor._queue)
        [f.result() for f in futures]
    finally:
        executor.shutdown()
    assert ahead_short == 2  # one running, one waiting in the worker's socket
    assert ahead_long == 1 and queued_long == 4  # one each; the rest wait in the parent
