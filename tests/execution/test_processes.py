import multiprocessing
import os
import signal
from concurrent.futures.process import BrokenProcessPool

import pytest

import feedline as fl
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
    assert multiprocessing.active_children() == []


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
    for child in multiprocessing.active_children():
        child.join(60)
