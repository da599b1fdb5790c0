"""Where a map's calls run is its MapRunner's (feedline.placement.runner): the kind it starts
with, its switch to processes while it runs, and the chunk sizes that follow the kind."""

from __future__ import annotations

import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.execution.executor import ThreadExecutor
from feedline.placement.runner import (
    MAX_CHUNK,
    MAX_FILL_SECONDS,
    MAX_PROCESS_CHUNK,
    TARGET_TASK_SECONDS,
    ChunkSizer,
    MapRunner,
)
from feedline.testing.threads import no_leaked_threads

pytestmark = pytest.mark.timeout(60)


def _double(x):
    return x * 2


def test_a_plain_runner_runs_tasks_on_its_threads_never_inline():
    runner = MapRunner(IteratorContext(), _double, "map(_double)", 3, "thread")
    assert (runner.kind, runner.inline, runner.warming, runner.decision) == (
        "thread", False, False, None)
    with no_leaked_threads():
        executor = runner.make_executor()
        assert isinstance(executor, ThreadExecutor) and executor.workers == 3
        assert executor.submit(_double, 4).result() == 8
        executor.shutdown()


def test_chunks_follow_the_kind_the_runner_switches_to():
    runner = MapRunner(IteratorContext(), _double, "map(_double)", 2, "thread")
    runner.sizer.measured(1, 1e-5, runner.kind)
    assert runner.sizer.chunk_size == int(TARGET_TASK_SECONDS["thread"] / 1e-5)
    runner._switch_to_processes()  # as the executor choice's decision does
    assert (runner.kind, runner.knobs.done) == ("process", True)
    assert runner.sizer.chunk_size == runner.knobs.chunk_size == int(
        TARGET_TASK_SECONDS["process"] / 1e-5)


@pytest.mark.parametrize("kind,most", [("thread", MAX_CHUNK), ("process", MAX_PROCESS_CHUNK)])
def test_cheap_calls_fill_chunks_up_to_the_kinds_cap(kind, most):
    sizer = ChunkSizer(MapRunner(IteratorContext(), _double, "m", 1, kind).knobs)
    sizer.measured(1000, 1e-6, kind)
    assert sizer.chunk_size == most


def test_a_slow_input_shrinks_chunks_for_processes_only():
    sizer = ChunkSizer(MapRunner(IteratorContext(), _double, "m", 1, "process").knobs)
    sizer.measured(100, 1e-3, "process")  # 10 us a call: about 500 make a 5 ms task
    assert sizer.next_size(bounded=True) == sizer.chunk_size == int(
        TARGET_TASK_SECONDS["process"] / (1e-3 / 100))
    sizer.pulled(1, MAX_FILL_SECONDS / 4)  # an element every quarter of the fill time
    assert sizer.next_size(bounded=True) == 4
    assert sizer.next_size(bounded=False) == sizer.chunk_size


def test_an_executor_process_map_runs_there_from_its_first_task():
    ds = fl.Dataset.range(6).map(_double, num_parallel_calls=2, executor="process")
    with no_leaked_threads(), iter(ds) as it:
        assert [int(x) for x in it] == [0, 2, 4, 6, 8, 10]
        assert it._root.executor_kind == "process"
