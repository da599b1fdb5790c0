"""A feeder (the whole pipeline in one worker process) feeds its GIL-bound maps' own worker
processes: the order-defining part runs once, the map's calls fan out, the output is exact."""

from __future__ import annotations

import os

import feedline as fl
from feedline.placement import worker_loop
from feedline.placement.map_executor import ExecutorChoice
from tests.placement.process_helpers import wait_gone


def test_a_map_in_a_feeder_measures_where_its_calls_run(monkeypatch):
    monkeypatch.setattr(worker_loop, "_POOL_SIZE", 1)  # this process as a feeder
    monkeypatch.setattr("feedline.placement.map_executor.schedulable_cpus", lambda: 8)
    choice = ExecutorChoice("map(f)", 8, abs)
    assert choice.measuring


def test_a_map_in_one_of_several_shards_stays_on_threads(monkeypatch):
    monkeypatch.setattr(worker_loop, "_POOL_SIZE", 4)
    monkeypatch.setattr("feedline.placement.map_executor.schedulable_cpus", lambda: 8)
    choice = ExecutorChoice("map(f)", 2, abs)
    assert choice.decision is not None and choice.decision.kind == "thread"
    assert choice.decision.reason == ("runs in one of 4 worker processes of multiprocess() "
                                      "(the CPUs are shared out between them)")


def _value_and_pid(x):
    return x * 3, os.getpid()


def test_a_feeder_feeds_its_map_s_worker_processes_in_order():
    ds = (fl.Dataset.range(60)
          .map(_value_and_pid, num_parallel_calls=2, executor="process")
          .batch(6).multiprocess(1))
    values, pids = [], set()
    with iter(ds) as it:
        for batch_values, batch_pids in it:
            values.extend(int(v) for v in batch_values)
            pids.update(int(p) for p in batch_pids)
    assert values == [3 * x for x in range(60)]  # the single-process output
    assert os.getpid() not in pids and pids  # computed in the feeder's map workers
    assert wait_gone(pids, 30) == []  # and those ended with the pipeline
