"""Worker processes start their native libraries with their share of the CPUs, not one
thread per CPU each (an oversubscribed machine, and a slower start)."""

from __future__ import annotations

import os

import feedline as fl
from feedline.core.validation import schedulable_cpus
from feedline.placement.ipc.spawn import NATIVE_THREAD_VARIABLES, worker_environment
from feedline.placement.process_executor import ProcessExecutor


def _native_threads(_: object = None) -> tuple[str | None, ...]:
    return tuple(os.environ.get(name) for name in NATIVE_THREAD_VARIABLES)


def _clear(monkeypatch) -> None:
    for name in NATIVE_THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_a_map_pool_gives_each_worker_its_share(monkeypatch):
    _clear(monkeypatch)
    executor = ProcessExecutor(2, "threads")
    try:
        share = str(max(1, schedulable_cpus() // 2))
        assert executor.submit(_native_threads).result(timeout=60) == (share,) * 4
    finally:
        executor.shutdown()


def test_what_the_user_set_is_kept(monkeypatch):
    _clear(monkeypatch)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "7")
    executor = ProcessExecutor(1, "threads")
    try:
        found = executor.submit(_native_threads).result(timeout=60)
    finally:
        executor.shutdown()
    cpus = str(schedulable_cpus())
    assert found == tuple("7" if name == "OPENBLAS_NUM_THREADS" else cpus
                          for name in NATIVE_THREAD_VARIABLES)


def test_pipeline_workers_get_their_cpu_budget(monkeypatch):
    _clear(monkeypatch)
    options = fl.Options(autotune=fl.AutotuneOptions(cpu_budget=5))
    ds = fl.Dataset.range(4).map(_native_threads).multiprocess(2).with_options(options)
    # multiprocess() gives each worker (budget - 1 for the consumer) // workers cores, the
    # budget being at most the CPUs there are.
    share = str(max(1, (options.autotune_parallelism() - 1) // 2)).encode()
    assert [tuple(batch) for batch in ds] == [(share,) * 4] * 4


def test_the_environment_without_a_share_is_this_process_s(monkeypatch):
    _clear(monkeypatch)
    env = worker_environment(None)
    assert all(name not in env for name in NATIVE_THREAD_VARIABLES)
    assert worker_environment(0)["OMP_NUM_THREADS"] == "1"  # at least one
