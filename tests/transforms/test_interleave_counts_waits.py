"""An unordered parallel interleave counts its consumer's waits for the tuner, also once one
of its datasets has ended."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import feedline as fl
from feedline.testing.threads import no_leaked_threads
from feedline.transforms.interleave_parallel import ParallelInterleaveIterator

pytestmark = pytest.mark.timeout(60)


def test_an_unordered_interleave_counts_its_waits_once_a_dataset_of_the_last_ended():
    # Every input opened (few files: the input ends at once), one dataset done, the other
    # still reading: the next call waits for it. The empty slot (nothing left to fill it)
    # made _element_ready() answer "ready" for the whole cycle, so that once any dataset
    # ended no wait was counted, and the tuner never saw its consumer wait.
    release = threading.Event()

    def slow():
        yield 100
        yield 101
        release.wait(30)
        yield 102

    def inner(x):
        if int(x) == 0:
            return fl.Dataset.range(1)
        return fl.Dataset.from_generator(slow, output_signature=fl.TensorSpec((), np.int64))

    options = fl.Options(autotune=fl.AutotuneOptions(processes=False),
                         threading=fl.ThreadingOptions(element_timeout=0.2))
    ds = fl.Dataset.range(2).interleave(inner, cycle_length=2, num_parallel_calls=fl.AUTOTUNE,
                                        deterministic=False).with_options(options)
    with no_leaked_threads():
        it = iter(ds)
        try:
            todo = [it._root]
            while not isinstance(todo[-1], ParallelInterleaveIterator):
                todo.extend(getattr(todo.pop(), "_inputs", []))
            stage = todo[-1]
            stage._tuner.stop()  # the test reads the counters
            assert sorted(int(next(it)) for _ in range(3)) == [0, 100, 101]
            with pytest.raises(TimeoutError):
                next(it)  # takes dataset 0's end, then waits for dataset 1
            assert stage._cycle[0] is None and stage._end_of_input
            waits = stage.knobs.counters.waits
            with pytest.raises(TimeoutError):
                next(it)  # nothing ready, nothing left to open: a wait
            assert stage.knobs.counters.waits == waits + 1
            release.set()
            assert [int(x) for x in it] == [102]
        finally:
            release.set()
            it.close()
