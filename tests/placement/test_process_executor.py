import multiprocessing
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures.process import BrokenProcessPool

import numpy as np
import psutil
import pytest
from process_helpers import feedline_mappings, wait_gone, worker_processes

import feedline as fl
from feedline.core.error_records import is_fatal
from feedline.placement.process_executor import MAX_START_FAILURES, ProcessExecutor
from feedline.testing import check_checkpointing
from feedline.transforms.ignore_errors import errors_ignored


def _pure_python(x):
    total = 0
    for i in range(1000):
        total += i % 7
    return x * 2 + total


def _die_on_three(x):
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def _raise_on_two(x):
    if x == 2:
        raise ValueError(f"bad element {x}")
    return x


def _outcomes(it) -> list:
    """Every outcome of ``it`` until it ends: values, and the exceptions ``next()`` raised."""
    out: list = []
    while True:
        try:
            out.append(int(next(it)))
        except StopIteration:
            return out
        except Exception as error:  # noqa: BLE001 - recorded in its place
            out.append(error)


@pytest.fixture(autouse=True)
def _workers_end():
    """Every worker process must have exited once the pipeline is done or closed, and no
    shared memory of the transport may stay mapped."""
    yield
    import gc

    gc.collect()
    assert worker_processes() == []
    assert feedline_mappings() == []


def test_process_map_results_in_order_and_workers_end():
    ds = fl.Dataset.range(20).map(_pure_python, num_parallel_calls=2, executor="process")
    assert [int(x) for x in ds] == [_pure_python(i) for i in range(20)]


def test_process_map_runs_lambdas_through_cloudpickle():
    offset = 5
    ds = fl.Dataset.range(4).map(lambda x: x + offset, num_parallel_calls=2, executor="process")
    assert [int(x) for x in ds] == [5, 6, 7, 8]


def test_process_map_error_keeps_type_and_names_element():
    it = iter(fl.Dataset.range(5).map(_raise_on_two, num_parallel_calls=2, executor="process"))
    assert [int(next(it)), int(next(it))] == [0, 1]
    with pytest.raises(ValueError, match="bad element 2") as info:
        next(it)
    assert any("input element 2" in note for note in info.value.__notes__)


def test_an_element_that_kills_its_worker_is_that_elements_error_in_its_place():
    ds = fl.Dataset.range(10).map(_die_on_three, num_parallel_calls=2, executor="process")
    with iter(ds) as it:
        outcomes = _outcomes(it)
    assert outcomes[:3] + outcomes[4:] == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    failure = outcomes[3]
    assert isinstance(failure, fl.WorkerProcessError) and not is_fatal(failure)
    assert re.search(r"map\(_die_on_three\): the worker process \(pid \d+\) running this call "
                     "was killed by signal SIGKILL", str(failure)), failure
    assert "feedline: raised in map(_die_on_three) at input element 3" in failure.__notes__


def _exit_at(index: int):
    def f(x):
        if int(x) == index:
            os._exit(3)
        return x

    return f


@pytest.mark.timeout(120)
def test_ignore_errors_drops_only_the_element_that_killed_its_worker():
    # Issue 29.1: 3 or 196 of 999 elements came out, and no error.
    ds = fl.Dataset.range(1000).map(_exit_at(7), num_parallel_calls=2, executor="process")
    with iter(ds.ignore_errors()) as it:
        values = [int(x) for x in it]
        dropped = errors_ignored(it)
    assert values == [x for x in range(1000) if x != 7] and dropped == 1


@pytest.mark.timeout(120)
def test_a_death_inside_a_chunk_costs_only_its_element():
    # Cheap calls run in chunks of many elements per call: the chunk whose worker died is
    # run again one element per call, so only the element that kills its worker fails.
    ds = fl.Dataset.range(600).map(_exit_at(450), num_parallel_calls=2, executor="process")
    with iter(ds) as it:
        outcomes = _outcomes(it)
        assert it._root._chunk_size > 1  # element 450 was computed in a chunk
    assert [o for i, o in enumerate(outcomes) if i != 450] == \
        [x for x in range(600) if x != 450]
    assert isinstance(outcomes[450], fl.WorkerProcessError), outcomes[450]
    assert "exited with code 3" in str(outcomes[450])


def _sleep_at(index: int, marker: str):
    """Element ``index`` waits (until killed) the first time; every call takes 10 ms, so
    calls run one element each (``TARGET_TASK_SECONDS``)."""

    def f(x):
        time.sleep(0.01)
        if int(x) == index and not os.path.exists(marker):
            with open(marker + ".tmp", "w") as out:
                out.write(str(os.getpid()))
            os.rename(marker + ".tmp", marker)
            time.sleep(600)
        return x

    return f


@pytest.mark.timeout(120)
def test_one_sigkill_of_a_busy_worker_costs_the_element_it_computed(tmp_path):
    # Issue 29.1: one SIGKILL of a worker left 708 of 3,000 elements, and no error.
    marker = tmp_path / "pid"
    ds = fl.Dataset.range(300).map(_sleep_at(123, str(marker)), num_parallel_calls=2,
                                   executor="process")
    with iter(ds.ignore_errors()) as it:
        values = [int(next(it)) for _ in range(123)]
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(int(marker.read_text()), signal.SIGKILL)
        values += [int(x) for x in it]
        assert errors_ignored(it) == 1
    assert values == [x for x in range(300) if x != 123]


def test_process_map_checkpointing():
    ds = fl.Dataset.range(6).map(_pure_python, num_parallel_calls=2, executor="process")
    check_checkpointing(ds, epochs=1, steps=[0, 3, 6])


def test_unknown_executor_rejected():
    with pytest.raises(ValueError, match="executor"):
        fl.Dataset.range(3).map(_pure_python, num_parallel_calls=2, executor="gpu")


@pytest.mark.timeout(120)
def test_close_does_not_wait_for_a_worker_process_that_blocks():
    manager = multiprocessing.Manager()
    try:
        release = manager.Event()

        def stuck_at_one(x):
            if x == 1:
                release.wait()
            return x

        options = fl.Options(threading=fl.ThreadingOptions(close_timeout=0.2))
        it = iter(fl.Dataset.range(4).map(stuck_at_one, num_parallel_calls=2, executor="process")
                  .with_options(options))
        assert int(next(it)) == 0
        with pytest.warns(RuntimeWarning, match="map"):
            it.close()
        release.set()  # the abandoned call returns; its worker then exits
    finally:
        manager.shutdown()
    assert worker_processes() == []


# ---------------------------------------------------------------- shipping functions once
_UNPICKLED_HERE = 0  # in a worker: how many times a _CountsUnpickling arrived there


def _rebuild_counter(offset):
    global _UNPICKLED_HERE
    _UNPICKLED_HERE += 1
    return _CountsUnpickling(offset)


class _CountsUnpickling:
    """A map function that reports, with each result, how often it was unpickled in the
    worker that ran it."""

    def __init__(self, offset):
        self.offset = offset

    def __reduce__(self):
        return _rebuild_counter, (self.offset,)

    def __call__(self, x):
        _pure_python(x)  # long enough that both workers get calls
        return np.array([int(x) + self.offset, os.getpid(), _UNPICKLED_HERE])


def test_function_is_unpickled_once_per_worker_not_per_call():
    ds = fl.Dataset.range(40).map(_CountsUnpickling(100), num_parallel_calls=2,
                                  executor="process")
    rows = [row.tolist() for row in ds]
    assert [value for value, _, _ in rows] == list(range(100, 140))
    assert {count for _, _, count in rows} == {1}  # every call in every worker: once
    assert 1 <= len({pid for _, pid, _ in rows}) <= 2


def test_large_closure_is_shipped_once_per_worker_and_calls_carry_no_copy():
    table = np.arange(20 * 1024 * 1024 // 8, dtype=np.float64)  # 20 MB

    def lookup(i):
        return float(table[i])

    executor = ProcessExecutor(2, "map(lookup)")
    try:
        futures = [executor.submit(lookup, i) for i in range(40)]
        assert [f.result() for f in futures] == [float(i) for i in range(40)]
        stats = executor.statistics()
    finally:
        executor.shutdown()
    assert stats.calls == 40
    assert 1 <= stats.workers_started <= 2
    assert stats.functions_shipped == stats.workers_started  # never once per call
    assert table.nbytes * stats.workers_started <= stats.function_bytes \
        <= (table.nbytes + 64 * 1024) * stats.workers_started


def test_a_second_function_is_shipped_to_a_worker_the_first_time_it_calls_it():
    executor = ProcessExecutor(1, "doc")
    try:
        assert executor.submit(abs, -3).result() == 3
        assert executor.submit(abs, -4).result() == 4
        assert executor.submit(len, "ab").result() == 2
        assert executor.statistics().functions_shipped == 2
    finally:
        executor.shutdown()


def test_array_results_come_back_whole_and_writable():
    executor = ProcessExecutor(1, "doc")
    try:
        result = executor.submit(np.full, (512, 512), 7.0).result()  # 2 MB: shared memory
        assert result.shape == (512, 512) and float(result.sum()) == 7.0 * 512 * 512
        result[0, 0] = 1.0
    finally:
        executor.shutdown()


# ---------------------------------------------------------------- errors, signals, exit
def test_worker_error_carries_the_worker_traceback():
    it = iter(fl.Dataset.range(5).map(_raise_on_two, num_parallel_calls=2, executor="process"))
    next(it), next(it)
    with pytest.raises(ValueError) as info:
        next(it)
    notes = "\n".join(info.value.__notes__)
    assert "worker traceback" in notes and "_raise_on_two" in notes


class _HoldsALock(Exception):
    def __init__(self):
        super().__init__("holds a lock")
        self.lock = threading.Lock()


def _unpicklable_error_at_one(x):
    if int(x) == 1:
        raise _HoldsALock
    return x


def test_an_error_that_does_not_pickle_stays_in_its_place():
    it = iter(fl.Dataset.range(3).map(_unpicklable_error_at_one, num_parallel_calls=1,
                                      executor="process"))
    assert int(next(it)) == 0
    with pytest.raises(RuntimeError, match="_HoldsALock: holds a lock.*cannot be sent back") \
            as info:
        next(it)
    assert any("input element 1" in note for note in info.value.__notes__)
    assert int(next(it)) == 2
    it.close()


def test_workers_ignore_sigint_so_the_parent_decides():
    executor = ProcessExecutor(1, "doc")
    try:
        pid = executor.submit(os.getpid).result()
        os.kill(pid, signal.SIGINT)
        assert executor.submit(os.getpid).result() == pid  # still the same worker
    finally:
        executor.shutdown()


def test_a_killed_worker_fails_only_the_call_it_ran_and_is_replaced():
    executor = ProcessExecutor(1, "map(doomed)")  # one worker: the calls after 3 need another
    try:
        futures = [executor.submit(_die_on_three, i) for i in range(8)]
        outcomes = []
        for future in futures:
            try:
                outcomes.append(future.result(timeout=60))
            except fl.WorkerProcessError as error:
                assert not is_fatal(error) and error.exitcode == -signal.SIGKILL
                assert re.search(r"map\(doomed\).*pid \d+.*SIGKILL", str(error)), error
                outcomes.append("died")
        assert outcomes == [0, 1, 2, "died", 4, 5, 6, 7]
        assert executor.submit(_die_on_three, 0).result(timeout=60) == 0  # goes on
        assert executor.statistics().workers_started == 2  # one replaced the dead
    finally:
        executor.shutdown()


def test_a_worker_killed_while_idle_is_replaced_and_costs_nothing():
    executor = ProcessExecutor(1, "doc")
    try:
        pid = executor.submit(os.getpid).result(timeout=60)
        os.kill(pid, signal.SIGKILL)
        assert wait_gone([pid], 20) == []
        assert [executor.submit(abs, -i).result(timeout=60) for i in range(3)] == [0, 1, 2]
        assert executor.submit(os.getpid).result(timeout=60) != pid
    finally:
        executor.shutdown()


class _ExitsOnLoad:
    """A function whose unpickling ends the process unpickling it (a worker never gets to
    run a call of it)."""

    def __init__(self, parent: int) -> None:
        self.parent = parent

    def __reduce__(self):
        return _exit_unless_parent, (self.parent,)

    def __call__(self, x):
        return x


def _exit_unless_parent(parent: int):
    if os.getpid() != parent:
        os._exit(4)
    return _ExitsOnLoad(parent)


def test_workers_that_die_before_running_a_call_break_the_pool_with_a_fatal_error():
    executor = ProcessExecutor(2, "map(unloadable)")
    try:
        futures = [executor.submit(_ExitsOnLoad(os.getpid()), i) for i in range(4)]
        for future in futures:
            with pytest.raises(BrokenProcessPool, match=r"map\(unloadable\): 3 worker "
                               r"processes in a row died before they could run a call.*"
                               r"exited with code 4") as raised:
                future.result(timeout=60)
            assert is_fatal(raised.value)
        later = executor.submit(abs, -1)  # every later call too
        with pytest.raises(BrokenProcessPool):
            later.result(timeout=60)
        assert is_fatal(later.exception())
        # Two start at once: at most one more than the failures that break it.
        assert MAX_START_FAILURES <= executor.statistics().workers_started \
            <= MAX_START_FAILURES + 1
    finally:
        executor.shutdown()


@pytest.mark.timeout(120)
def test_ignore_errors_raises_when_the_workers_cannot_start_instead_of_ending():
    ds = fl.Dataset.range(50).map(_ExitsOnLoad(os.getpid()), num_parallel_calls=2,
                                  executor="process")
    with iter(ds.ignore_errors()) as it:
        with pytest.raises(BrokenProcessPool, match="died before they could run a call"):
            next(it)


def _unloadable():
    raise ImportError("the module of this function is not installed in the worker")


class _FailsToLoad:
    def __reduce__(self):
        return _unloadable, ()

    def __call__(self, x):
        return x


@pytest.mark.timeout(120)
def test_a_function_that_cannot_be_loaded_in_a_worker_is_fatal_not_an_element_error():
    ds = fl.Dataset.range(20).map(_FailsToLoad(), num_parallel_calls=2, executor="process")
    with iter(ds.ignore_errors()) as it:
        with pytest.raises(ImportError, match="not installed in the worker") as raised:
            next(it)
    assert is_fatal(raised.value)
    assert any("cannot be loaded in a worker process" in n for n in raised.value.__notes__)


def test_a_function_that_does_not_pickle_is_fatal_not_an_element_error():
    lock = threading.Lock()
    executor = ProcessExecutor(1, "map(locked)")
    try:
        future = executor.submit(lambda x: (lock, x)[1], 1)
        with pytest.raises(TypeError, match="lock") as raised:
            future.result(timeout=60)
        assert is_fatal(raised.value)
    finally:
        executor.shutdown()


def _raise_local_class_at(index: int):
    class LocalError(Exception):
        """Defined in a function: plain pickle cannot send it back, cloudpickle can."""

    def f(x):
        if int(x) == index:
            raise LocalError(f"local failure at {int(x)}")
        return x

    return f, LocalError


def test_an_error_of_a_class_plain_pickle_cannot_send_arrives_as_that_class():
    fn, local_error = _raise_local_class_at(1)
    executor = ProcessExecutor(1, "map(local)")
    try:
        assert executor.submit(fn, 0).result(timeout=60) == 0
        with pytest.raises(local_error, match="local failure at 1") as raised:
            executor.submit(fn, 1).result(timeout=60)
        assert type(raised.value) is local_error
        assert any("worker traceback" in note for note in raised.value.__notes__)
    finally:
        executor.shutdown()


@pytest.mark.timeout(120)
def test_shutdown_terminates_a_worker_stuck_in_a_call_and_leaves_no_process():
    executor = ProcessExecutor(2, "map(stuck)", close_timeout=0.2)
    pids = [executor.submit(os.getpid).result()]
    stuck = executor.submit(time.sleep, 3600)
    time.sleep(0.2)  # the call has started (only the wait for it is being tested)
    with pytest.warns(RuntimeWarning, match=r"map\(stuck\).*terminated"):
        executor.shutdown()
    assert stuck.done()
    assert not {p.pid for p in worker_processes()} & set(pids)


@pytest.mark.timeout(120)
def test_interpreter_exit_ends_workers_even_one_stuck_in_a_call():
    script = textwrap.dedent("""
        import os, time, warnings
        import feedline as fl
        warnings.simplefilter("ignore")
        def stuck_after_pid(x):
            if int(x) == 0:
                return os.getpid()
            time.sleep(3600)
        it = iter(fl.Dataset.range(4).map(stuck_after_pid, num_parallel_calls=2,
                                          executor="process"))
        print(int(next(it)), flush=True)
        os._exit(0)  # no close, no atexit: only the workers' own watch can end them
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=100, check=False)
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[0])
    deadline = time.monotonic() + 30
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_shared_buffers_of_results_and_arguments_are_reused():
    """Freed results hand their shared buffer back to the worker (transport.Channel reuse):
    many large results do not need one new shared-memory file each."""
    executor = ProcessExecutor(1, "doc")
    try:
        for i in range(40):
            big = np.full(300_000, i, np.float64)  # 2.4 MB each way
            result = executor.submit(np.negative, big).result()
            assert float(result[0]) == -i
            del result  # freed: its buffer goes back with the next call
        worker = executor._workers[0]
        assert len(worker.channel._mapped) <= 4  # a few buffers, reused
    finally:
        executor.shutdown()
