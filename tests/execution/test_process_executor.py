import multiprocessing
import os
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
from process_helpers import worker_processes

import feedline as fl
from feedline.execution.processes import ProcessExecutor
from feedline.testing import check_checkpointing


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


@pytest.fixture(autouse=True)
def _workers_end():
    """Every worker process must have exited once the pipeline is done or closed."""
    yield
    import gc

    gc.collect()
    assert worker_processes() == []


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


def test_killed_worker_fails_the_pipeline_instead_of_hanging():
    ds = fl.Dataset.range(10).map(_die_on_three, num_parallel_calls=2, executor="process")
    with pytest.raises(BrokenProcessPool):
        list(ds)


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


def test_killed_worker_fails_pending_calls_with_the_stage_named():
    executor = ProcessExecutor(2, "map(doomed)")
    try:
        futures = [executor.submit(_die_on_three, i) for i in range(8)]
        with pytest.raises(BrokenProcessPool, match=r"map\(doomed\).*signal 9"):
            for future in futures:
                future.result(timeout=60)
        with pytest.raises(BrokenProcessPool):  # later calls fail in their place
            executor.submit(_die_on_three, 0).result(timeout=60)
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
