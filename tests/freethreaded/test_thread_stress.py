"""Many threads through every parallel stage at once: exact outputs, and every thread ends.

These run on any interpreter; on a free-threaded one (3.13t with ``PYTHON_GIL=0``) the
threads really run at the same time, which is where a race that the GIL hid shows. Each
test checks the exact output (the order where the stage is deterministic, else the
multiset) and that every thread it started, the pipeline's and its own, has ended.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import feedline as fl
from feedline.pipeline import PipelineIterator

JOIN_SECONDS = 20.0
"""How long a test waits for a thread it started (a hang fails, it does not block the run)."""

THREADS = 8
"""Consumer threads in the tests that share a pipeline or a dataset object."""


@contextmanager
def threads_end() -> Iterator[None]:
    """Every thread started in the block (the test's and feedline's) has ended after it."""
    before = set(threading.enumerate())
    yield
    started = [t for t in threading.enumerate() if t not in before]
    for thread in started:
        thread.join(JOIN_SECONDS)
    alive = [t.name for t in started if t.is_alive()]
    assert not alive, f"threads still running: {alive}"


def run_threads(count: int, target: Callable[[int], Any]) -> list[Any]:
    """``target(i)`` on ``count`` threads started together; their results, or re-raise the
    first error one of them raised."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait(JOIN_SECONDS)
            results[index] = target(index)
        except BaseException as error:  # noqa: BLE001 - re-raised on the test's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,), name=f"stress-{i}") for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_SECONDS)
    assert not any(t.is_alive() for t in threads), "a stress thread did not finish"
    if errors:
        raise errors[0]
    return results


def ints(dataset: fl.Dataset) -> list[int]:
    return [int(x) for x in dataset]


def work(x: Any) -> np.int64:
    """A little Python and NumPy per element, so that calls overlap on several threads."""
    total = sum(range(int(x) % 7 * 20))
    return np.int64(int(x) * 3 + total - total)


def pair(x: Any) -> tuple[np.int64, np.ndarray]:
    return np.int64(x), np.full(3, int(x), np.int32)


def _node_types(dataset: fl.Dataset) -> set[str]:
    """The class names of every node of a (rewritten) graph."""
    seen, stack = set(), [dataset]
    while stack:
        node = stack.pop()
        seen.add(type(node).__name__)
        stack.extend(node._inputs)
    return seen


# ----------------------------------------------------------------------------- map
@pytest.mark.parametrize("deterministic", [True, False])
def test_parallel_map_many_calls_at_once(deterministic):
    ds = fl.Dataset.range(2000).map(work, num_parallel_calls=8, deterministic=deterministic,
                                    executor="thread")
    expected = [3 * x for x in range(2000)]
    with threads_end():
        out = ints(ds)
    if deterministic:
        assert out == expected
    else:
        assert sorted(out) == expected


def test_parallel_map_tuned_with_statistics_read_while_running():
    """The tuner sets the map's threads and statistics sample the stages on their own
    threads while a consumer reads: the output stays exact."""
    options = fl.Options(profiling=fl.ProfilingOptions(statistics=True, interval=0.001))
    ds = fl.Dataset.range(3000).map(work, num_parallel_calls=fl.AUTOTUNE,
                                    executor="thread").prefetch(fl.AUTOTUNE).with_options(options)
    with threads_end(), iter(ds) as it:
        out = []
        for element in it:
            out.append(int(element))
            if len(out) % 500 == 0:
                assert it.statistics().elements >= 0
        statistics = it.statistics()
    assert out == [3 * x for x in range(3000)]
    assert statistics.elements == 3000


def test_tuned_pipelines_on_many_threads():
    """Tuned stages (map and interleave at AUTOTUNE, prefetch AUTOTUNE) of pipelines on
    several threads at once, each with its tuner and statistics: every output exact."""
    options = fl.Options(profiling=fl.ProfilingOptions(statistics=True, interval=0.001))

    def one(index: int) -> tuple[list[int], int]:
        ds = fl.Dataset.range(8).interleave(
            lambda x: fl.Dataset.range(int(x) * 100, int(x) * 100 + 60), cycle_length=4,
            num_parallel_calls=fl.AUTOTUNE).map(
            work, num_parallel_calls=fl.AUTOTUNE, executor="thread").prefetch(
            fl.AUTOTUNE).with_options(options)
        with iter(ds) as it:
            out = [int(x) for x in it]
            return out, it.statistics().elements

    expected = [3 * x for x in ints(fl.Dataset.range(8).interleave(
        lambda x: fl.Dataset.range(int(x) * 100, int(x) * 100 + 60), cycle_length=4))]
    with threads_end():
        outs = run_threads(4, one)
    assert outs == [(expected, len(expected))] * 4


# ----------------------------------------------------------------------------- batch
@pytest.mark.parametrize("deterministic", [True, False])
def test_parallel_batch(deterministic):
    ds = fl.Dataset.range(1003).map(pair).batch(10, num_parallel_calls=4,
                                                deterministic=deterministic)
    with threads_end():
        batches = [(b[0].tolist(), b[1].tolist()) for b in ds]
    expected = [(list(range(s, min(s + 10, 1003))),
                 [[x] * 3 for x in range(s, min(s + 10, 1003))]) for s in range(0, 1003, 10)]
    if deterministic:
        assert batches == expected
    else:
        assert sorted(batches) == expected


class _Square:
    """A map function with a batch form: ``map(f).batch(n)`` runs as one fused stage."""

    def __call__(self, x: Any) -> np.int64:
        return np.int64(int(x) * int(x))

    def feedline_batch_form(self, xs: list[Any]) -> np.ndarray:
        return np.asarray(xs, np.int64) ** 2


def test_map_and_batch_fused_parallel():
    ds = fl.Dataset.range(2005).map(_Square(), num_parallel_calls=8).batch(16)
    with threads_end(), iter(ds) as it:
        assert "MapAndBatchDataset" in _node_types(it._dataset)
        out = [b.tolist() for b in it]
    assert out == [[x * x for x in range(s, min(s + 16, 2005))] for s in range(0, 2005, 16)]


# ----------------------------------------------------------------------------- interleave
@pytest.mark.parametrize("deterministic", [True, False])
def test_parallel_interleave(deterministic):
    def open_one(x: Any) -> fl.Dataset:
        start = int(x) * 1000
        return fl.Dataset.range(start, start + 40 + int(x) % 5).map(work)

    ds = fl.Dataset.range(24).interleave(open_one, cycle_length=6, block_length=3,
                                         num_parallel_calls=6, deterministic=deterministic)
    sequential = fl.Dataset.range(24).interleave(open_one, cycle_length=6, block_length=3)
    expected = ints(sequential)
    with threads_end():
        out = ints(ds)
    if deterministic:
        assert out == expected
    else:
        assert sorted(out) == sorted(expected)


def test_interleave_of_parallel_maps_and_prefetches():
    """Nested stages: every open dataset runs its own parallel map and prefetch threads."""
    def open_one(x: Any) -> fl.Dataset:
        start = int(x) * 100
        return fl.Dataset.range(start, start + 30).map(
            work, num_parallel_calls=3, executor="thread").prefetch(4)

    ds = fl.Dataset.range(12).interleave(open_one, cycle_length=4, num_parallel_calls=4)
    expected = ints(fl.Dataset.range(12).interleave(
        lambda x: fl.Dataset.range(int(x) * 100, int(x) * 100 + 30).map(work), cycle_length=4))
    with threads_end():
        assert ints(ds) == expected


# ----------------------------------------------------------------------------- shuffle
def test_shuffle_iterators_started_at_once_get_distinct_epochs():
    """Iterators of one seeded shuffle started on several threads at once each take their
    own epoch (tf.data's seed generator): together exactly the first THREADS epochs."""
    ds = fl.Dataset.range(200).shuffle(64, seed=7)
    expected = sorted(tuple(int(x) for x in PipelineIterator(ds, epoch=e))
                      for e in range(THREADS))
    assert len(set(expected)) == THREADS  # the epochs do differ
    with threads_end():
        orders = run_threads(THREADS, lambda _: tuple(ints(ds)))
    assert sorted(orders) == expected


def test_shuffle_after_parallel_map_shared_by_consumer_threads():
    """One pipeline iterator shared by consumer threads: each element to exactly one."""
    ds = fl.Dataset.range(1500).map(work, num_parallel_calls=4, executor="thread") \
        .shuffle(100, seed=3).prefetch(8)
    with threads_end(), iter(ds) as it:
        parts = run_threads(THREADS, lambda _: [int(x) for x in it])
    taken = [x for part in parts for x in part]
    assert collections.Counter(taken) == collections.Counter(3 * x for x in range(1500))


# ----------------------------------------------------------------------------- cache
def test_memory_cache_filled_and_read_by_many_threads():
    calls = collections.Counter()
    lock = threading.Lock()

    def count(x: Any) -> Any:
        with lock:
            calls[int(x)] += 1
        return x

    ds = fl.Dataset.range(500).map(count).map(work, num_parallel_calls=4,
                                              executor="thread").cache()
    expected = [3 * x for x in range(500)]
    with threads_end():
        outs = run_threads(THREADS, lambda _: ints(ds))
        assert outs == [expected] * THREADS
        # Once complete, the cache is read, never the input again.
        before = sum(calls.values())
        assert run_threads(THREADS, lambda _: ints(ds)) == [expected] * THREADS
        assert sum(calls.values()) == before


def test_file_cache_one_writer_then_many_readers(tmp_path):
    path = str(tmp_path / "cache")
    ds = fl.Dataset.range(300).map(pair).map(lambda a, b: (a, b * 2), num_parallel_calls=4) \
        .cache(path)

    def read(_: int) -> list[tuple[int, list[int]]] | str:
        try:
            return [(int(a), b.tolist()) for a, b in ds]
        except FileExistsError:  # another thread is filling it (tf.data's rule)
            return "busy"

    expected = [(x, [2 * x] * 3) for x in range(300)]
    with threads_end():
        first = run_threads(THREADS, read)
        assert all(out == expected or out == "busy" for out in first)
        assert expected in first
        assert run_threads(THREADS, read) == [expected] * THREADS  # complete: all read


# ----------------------------------------------------------------------------- prefetch
def test_prefetch_chain_shared_by_consumer_threads():
    ds = fl.Dataset.range(1500).prefetch(3).map(work).prefetch(fl.AUTOTUNE).prefetch(1)
    with threads_end(), iter(ds) as it:
        parts = run_threads(THREADS, lambda _: [int(x) for x in it])
    for part in parts:  # each thread sees its share in pipeline order
        assert part == sorted(part)
    assert sorted(x for part in parts for x in part) == [3 * x for x in range(1500)]


def test_many_pipelines_at_once():
    """Independent pipelines on several threads: no stage shares state with another."""
    def one(index: int) -> list[int]:
        return ints(fl.Dataset.range(index * 1000, index * 1000 + 400)
                    .map(work, num_parallel_calls=3, executor="thread")
                    .batch(7, num_parallel_calls=2).unbatch().prefetch(5))

    with threads_end():
        outs = run_threads(THREADS, one)
    assert outs == [[3 * x for x in range(i * 1000, i * 1000 + 400)] for i in range(THREADS)]


# ----------------------------------------------------------------------------- checkpoints
def _pipeline() -> fl.Dataset:
    return fl.Dataset.range(12).interleave(
        lambda x: fl.Dataset.range(int(x) * 100, int(x) * 100 + 25), cycle_length=3,
        num_parallel_calls=3).map(work, num_parallel_calls=4, executor="thread") \
        .shuffle(16, seed=5, reshuffle_each_iteration=False).batch(4, num_parallel_calls=2) \
        .prefetch(3)


def test_checkpoints_taken_while_other_threads_iterate():
    """States taken on one thread while others read each restore exactly the rest."""
    ds = _pipeline()
    expected = [b.tolist() for b in ds]
    states: list[dict[str, Any]] = []
    with threads_end():
        with iter(ds) as it:
            def consume(index: int) -> list[list[int]]:
                if index == 0:  # the checkpointer
                    for _ in range(4):
                        states.append(it.state_dict())
                    return []
                return [b.tolist() for b in it]

            parts = run_threads(4, consume)
        assert sorted(b for part in parts for b in part) == sorted(expected)
        for state in states:
            with iter(ds) as restored:
                restored.load_state_dict(state)
                rest = [b.tolist() for b in restored]
            assert rest == expected[len(expected) - len(rest):]


def test_restore_into_an_iterator_while_its_readers_run():
    ds = _pipeline()
    expected = [b.tolist() for b in ds]
    with threads_end(), iter(ds) as it:
        for _ in range(5):
            next(it)
        state = it.state_dict()
        head = [next(it).tolist() for _ in range(20)]  # readers are far ahead now
        it.load_state_dict(state)
        assert [b.tolist() for b in it] == expected[5:]
    assert head == expected[5:25]


# ----------------------------------------------------------------------------- close
def test_close_from_another_thread_while_producers_run():
    started = threading.Event()

    def slow(x: Any) -> Any:
        started.set()
        return work(x)

    ds = fl.Dataset.range(10 ** 6).map(slow, num_parallel_calls=8, executor="thread") \
        .interleave(lambda x: fl.Dataset.from_tensors(x).repeat(3), cycle_length=4,
                    num_parallel_calls=4).prefetch(16)
    with threads_end():
        it = iter(ds)

        def consume(index: int) -> int:
            count = 0
            for _ in it:
                count += 1
            return count

        def close(index: int) -> None:
            started.wait(JOIN_SECONDS)
            it.close()

        consumers = threading.Thread(target=lambda: results.append(run_threads(3, consume)))
        results: list[list[int]] = []
        consumers.start()
        run_threads(2, close)  # two closes at once: each returns once all is stopped
        consumers.join(JOIN_SECONDS)
        assert not consumers.is_alive()
        with pytest.raises(StopIteration):
            next(it)
    assert len(results) == 1 and all(count >= 0 for count in results[0])


def test_iterators_dropped_on_other_threads_close():
    """Pipelines abandoned mid-way by threads are closed when collected, wherever that is."""
    def abandon(index: int) -> int:
        it = iter(fl.Dataset.range(10 ** 6).map(work, num_parallel_calls=4, executor="thread")
                  .prefetch(8))
        return int(next(it))

    with threads_end():
        assert run_threads(THREADS, abandon) == [0] * THREADS
        import gc
        gc.collect()
