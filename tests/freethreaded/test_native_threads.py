"""feedline's C extensions used from many threads at once: nothing lost, nothing counted twice,
no crash. On a free-threaded build these run truly in parallel (the reason for the shuffle
loops' critical sections and the probe's atomics and mutex); on a GIL build they must hold too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

shuffle_fast = pytest.importorskip("feedline.transforms._shuffle_fast",
                                   reason="the optional C extension is not built")
probe_module = pytest.importorskip("feedline.profiling._probe",
                                   reason="the optional C extension is not built")

THREADS = 8


def _run(work: Callable[[int], None], count: int = THREADS) -> None:
    """Runs ``work(index)`` on ``count`` threads started together; all end within 120 s."""
    start = threading.Barrier(count)
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            start.wait(timeout=60)
            work(index)
        except BaseException as error:  # noqa: BLE001 - reported by the test thread
            errors.append(error)

    threads = [threading.Thread(target=body, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert not errors, errors[0]


def test_drains_of_one_buffer_from_many_threads_hand_out_each_element_once():
    total = 40_000
    buffer = list(range(total))
    outs: list[list[int]] = [[] for _ in range(THREADS)]
    refused = [0] * THREADS

    def work(index: int) -> None:
        rng = np.random.default_rng(index)
        for _ in range(400):
            try:
                shuffle_fast.drain(buffer, rng.random(13), outs[index])
            except ValueError:  # fewer left than draws: checked under the buffer's lock
                refused[index] += 1
                return

    _run(work)
    drawn = [element for out in outs for element in out]
    assert sorted(drawn + buffer) == list(range(total))
    assert len(drawn) % 13 == 0 and len(buffer) < 13  # whole calls only, until too few left
    assert sum(refused) >= 1


def test_swaps_into_one_buffer_from_many_threads_keep_every_element():
    buffer = list(range(1000))
    fresh = [list(range(10_000 * (index + 1), 10_000 * (index + 1) + 3000))
             for index in range(THREADS)]
    outs: list[list[int]] = [[] for _ in range(THREADS)]
    reads = [0]

    def work(index: int) -> None:
        if index == THREADS - 1:  # a reader of the buffer meanwhile (lock-free list reads)
            for _ in range(20_000):
                if buffer[len(buffer) // 2] is not None:
                    reads[0] += 1
            return
        rng = np.random.default_rng(index)
        for start in range(0, 3000, 50):
            shuffle_fast.swap_draws(buffer, rng.random(50), fresh[index], start, outs[index])

    _run(work)
    fed = [element for index in range(THREADS - 1) for element in fresh[index]]
    everything = [element for out in outs for element in out] + buffer
    assert sorted(everything) == sorted(list(range(1000)) + fed)
    assert len(buffer) == 1000 and reads[0] == 20_000


class _SafeCounter:
    """An iterator that many threads may call: the numbers 0 .. total - 1, each once."""

    def __init__(self, total: int) -> None:
        self._next, self._total, self._lock = 0, total, threading.Lock()

    def __iter__(self) -> _SafeCounter:
        return self

    def __next__(self) -> int:
        with self._lock:
            if self._next >= self._total:
                raise StopIteration
            self._next += 1
            return self._next - 1


def test_a_probe_called_from_many_threads_counts_every_call_once():
    total = 200_000
    spans: list[tuple[int, int, int]] = []
    sizes = []
    probe = probe_module.Probe(_SafeCounter(total), spans, 50,
                               lambda element: sizes.append(element) or 8)
    ticks = [0]

    def tick() -> None:
        ticks[0] += 1

    seen: list[list[int]] = [[] for _ in range(THREADS)]

    def work(index: int) -> None:
        if index == THREADS - 1:  # swaps the tick callback while the others call next()
            for round_ in range(2000):
                probe._probe_drive(tick if round_ % 2 else (lambda: None), 1e-6)
            probe._probe_drive(None, 1.0)
            return
        seen[index] = list(probe)

    _run(work)
    values = sorted(value for got in seen for value in got)
    assert values == list(range(total))
    counts = probe._probe_counts()
    stops = THREADS - 1  # each reading thread ended with one StopIteration
    assert counts["calls"] == total + stops
    assert counts["stops"] == stops and counts["errors"] == 0
    # Every call is either the first, a timed one or an untimed one.
    assert 1 + counts["sampled"] + counts["untimed"] == counts["calls"]
    assert counts["sized"] == len(sizes) and counts["sized_bytes"] == 8 * len(sizes)
    assert 1 <= len(counts["threads"]) <= THREADS - 1
    assert 0 < len(spans) <= 50 + THREADS  # the cap, overshot by at most a racing call each


def test_a_failing_sizer_is_dropped_once_whatever_the_threads():
    probe = probe_module.Probe(_SafeCounter(50_000), None, 0, lambda element: 1 / 0)

    def work(index: int) -> None:
        for _ in probe:
            pass

    with pytest.warns(RuntimeWarning, match="measuring an element's size failed"):
        _run(work, 4)
    assert probe._probe_counts()["calls"] == 50_000 + 4
