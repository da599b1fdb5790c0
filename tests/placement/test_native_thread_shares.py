"""Worker processes get their share of the CPUs as native thread counts (OpenMP, MKL,
OpenBLAS …); a count the user set is left as it is."""

from __future__ import annotations

import os

import pytest

import feedline as fl
from feedline.core.validation import schedulable_cpus
from feedline.placement.ipc.spawn import NATIVE_THREAD_VARIABLES

QUICK = fl.Options(threading=fl.ThreadingOptions(close_timeout=0.5))


def _native_threads(_: object = None) -> tuple[str | None, ...]:
    return tuple(os.environ.get(name) for name in NATIVE_THREAD_VARIABLES)


@pytest.mark.timeout(120)
def test_a_feeder_s_map_workers_get_their_own_share_of_the_cpus(monkeypatch):
    # The feeder's environment holds the native thread counts feedline gave it (the whole
    # budget); its map's worker processes inherited them as if the user had set them
    # ("left alone where the user set them"), so each of n map workers started a thread per
    # CPU: the oversubscription the counts are there to prevent.
    for name in NATIVE_THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    ds = (fl.Dataset.range(4).map(_native_threads, num_parallel_calls=2, executor="process")
          .multiprocess(1).with_options(QUICK))
    share = str(max(1, schedulable_cpus() // 2))
    assert [tuple(value.decode() for value in values) for values in ds] == \
        [(share,) * len(NATIVE_THREAD_VARIABLES)] * 4


def test_a_worker_s_own_workers_get_their_share_but_the_user_s_setting_stays(monkeypatch):
    from feedline.placement.ipc import spawn

    for name in NATIVE_THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "7")  # the user's
    feeder = spawn.worker_environment(8)
    assert [feeder[name] for name in NATIVE_THREAD_VARIABLES] == ["8", "8", "7", "8"]
    # In the feeder (its environment is the one it was given), a pool of four workers:
    monkeypatch.setattr(os, "environ", dict(feeder))
    worker = spawn.worker_environment(2)
    assert [worker[name] for name in NATIVE_THREAD_VARIABLES] == ["2", "2", "7", "2"]
    # With no share given, what the process has is passed on as it is.
    assert [spawn.worker_environment(None)[name] for name in NATIVE_THREAD_VARIABLES] == \
        ["8", "8", "7", "8"]
