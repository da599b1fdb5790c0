"""On a free-threaded interpreter a threaded map's tasks carry more work (issue 39).

Its consumer runs beside its workers there, and each task costs it a wait, a future and a
hand-off: tasks of at least ``FREE_THREADED_TASK_SECONDS`` (2 ms) instead of the GIL build's
0.5 ms. Processes keep their target.
"""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl
from feedline.placement import policy
from feedline.placement.policy import FREE_THREADED_TASK_SECONDS, thread_task_seconds
from feedline.placement.runner import MAX_CHUNK, MAX_PROCESS_CHUNK
from feedline.testing.threads import no_leaked_threads
from feedline.transforms.map import ParallelMapIterator

US = 1e-6

pytestmark = pytest.mark.timeout(60)


def _triple(x):
    return int(x) * 3


@pytest.mark.parametrize(("free_threaded", "executor", "seconds_per_element", "chunk"), [
    (False, "thread", 40 * US, 12),   # 0.5 ms of work
    (True, "thread", 40 * US, 50),    # 2 ms
    (True, "thread", 10 * US, MAX_CHUNK),
    (True, "thread", 3000 * US, 1),
    (True, "process", 40 * US, 125),  # 5 ms, as under the GIL
    (True, "process", 1 * US, MAX_PROCESS_CHUNK),
])
def test_a_task_carries_the_interpreters_target_of_work(monkeypatch, free_threaded, executor,
                                                        seconds_per_element, chunk):
    monkeypatch.setattr(policy, "gil_disabled", lambda: free_threaded)
    ds = fl.Dataset.range(10).map(_triple, num_parallel_calls=2, executor=executor)
    with iter(ds) as it:
        stage = it._root
        assert isinstance(stage, ParallelMapIterator)
        stage._adapt_chunk_size(16, 16 * seconds_per_element)
        assert stage._chunk_size == chunk


def test_the_target_on_threads(monkeypatch):
    monkeypatch.setattr(policy, "gil_disabled", lambda: True)
    assert thread_task_seconds(0.0005) == FREE_THREADED_TASK_SECONDS == 0.002
    assert thread_task_seconds(0.01) == 0.01
    monkeypatch.setattr(policy, "gil_disabled", lambda: False)
    assert thread_task_seconds(0.0005) == 0.0005


def test_larger_tasks_keep_the_output_and_errors_in_place(monkeypatch):
    monkeypatch.setattr(policy, "gil_disabled", lambda: True)

    def failing(x):
        if int(x) in (3, 170):
            raise ValueError(f"bad {int(x)}")
        return int(x) * 3

    ds = fl.Dataset.range(300).map(failing, num_parallel_calls=2, executor="thread")
    out: list = []
    with no_leaked_threads(), iter(ds) as it:
        it._root._adapt_chunk_size(16, 16 * 40 * US)  # tasks of 50 elements
        assert it._root._chunk_size == 50
        while True:
            try:
                out.append(int(next(it)))
            except StopIteration:
                break
            except ValueError as error:
                out.append(str(error))
    assert out == [f"bad {i}" if i in (3, 170) else 3 * i for i in range(300)]


def _array(x):
    return np.full(4, int(x))


def test_a_result_handed_out_is_not_kept_alive_by_the_task_in_hand():
    # A task's outcomes are handed out from the task in hand, one by one: each result
    # handed out is the consumer's alone (a budget of results in flight counts on it).
    # (Asked of the stage's references: a free-threaded interpreter may free an object
    # another thread made later than its last reference goes.)
    ds = fl.Dataset.range(40).map(_array, num_parallel_calls=2, executor="thread")
    with no_leaked_threads(), iter(ds) as it:
        stage = it._root
        stage._adapt_chunk_size(16, 16 * 40 * US)  # tasks of 12 elements
        first, second = next(it), next(it)
        assert first.tolist() == [0] * 4 and second.tolist() == [1] * 4
        assert len(stage._outcomes) == 12
        held = [value for _, value in stage._outcomes]
        assert not any(value is first or value is second for value in held)
        assert sum(value is not None for value in held) == 10
        assert [int(next(it)[0]) for _ in range(38)] == list(range(2, 40))
