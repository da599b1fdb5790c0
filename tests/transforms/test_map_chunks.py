"""How a parallel map sizes its tasks: about TARGET_TASK_SECONDS of work, within a per-kind
cap (processes pay a send, a receive and a wake-up per task: they carry more elements)."""

from __future__ import annotations

import pytest

import feedline as fl
from feedline.placement.policy import PROCESS_TARGET_TASK_SECONDS
from feedline.placement.runner import MAX_CHUNK, MAX_PROCESS_CHUNK, TARGET_TASK_SECONDS
from feedline.testing.threads import no_leaked_threads
from feedline.transforms.map import ParallelMapIterator
from tests.placement.process_helpers import worker_processes

US = 1e-6


def _triple(x):
    return int(x) * 3


def _stage(executor: str):
    ds = fl.Dataset.range(10).map(_triple, num_parallel_calls=2, executor=executor)
    it = iter(ds)
    assert isinstance(it._root, ParallelMapIterator)
    return it, it._root


# The GIL build's task targets (a free-threaded build gives thread tasks 2 ms).
@pytest.mark.usefixtures("gil_build_rules")
@pytest.mark.parametrize(("executor", "seconds_per_element", "chunk"), [
    ("thread", 40 * US, 12),             # 0.5 ms of work
    ("thread", 1 * US, MAX_CHUNK),
    ("process", 40 * US, 125),           # 5 ms of work, past the threads' cap
    ("process", 1 * US, MAX_PROCESS_CHUNK),
    ("process", 10_000 * US, 1),
])
def test_a_task_carries_its_target_of_work_within_its_kinds_cap(executor, seconds_per_element,
                                                                 chunk):
    it, stage = _stage(executor)
    with it:
        stage._adapt_chunk_size(16, 16 * seconds_per_element)
        assert stage._chunk_size == chunk
    assert worker_processes() == []  # sized before any task: no process was started


def test_the_process_target_is_the_placement_policy_s():
    # The executor choice estimates the processes' rate from this target.
    assert TARGET_TASK_SECONDS["process"] == PROCESS_TARGET_TASK_SECONDS


@pytest.mark.slow  # starts two worker processes: seconds on a loaded machine
@pytest.mark.timeout(60)
def test_chunked_process_tasks_keep_the_exact_output_and_errors():
    def failing(x):
        if int(x) in (7, 1500):
            raise ValueError(f"bad {int(x)}")
        return int(x) * 3

    ds = fl.Dataset.range(3000).map(failing, num_parallel_calls=2, executor="process")
    got = []
    with no_leaked_threads(), iter(ds) as it:
        while True:
            try:
                got.append(int(next(it)))
            except StopIteration:
                break
            except ValueError as error:
                got.append(str(error))
    assert got == [f"bad {i}" if i in (7, 1500) else 3 * i for i in range(3000)]
    assert worker_processes() == []
