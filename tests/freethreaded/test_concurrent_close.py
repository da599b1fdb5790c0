"""Two closes at once: a stage is released once, and neither close returns early."""

from __future__ import annotations

import threading
from typing import Any

import feedline as fl
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.testing import feedline_threads


class _Stage(DatasetIterator):
    """Counts its releases; reading its closed flag waits (briefly) for a second reader, the
    worst interleaving of two unguarded test-then-set closes."""

    def __init__(self) -> None:
        self._flag = False
        self._both_read = threading.Barrier(2, timeout=0.5)
        super().__init__(IteratorContext())
        self.released = 0

    @property
    def _closed(self) -> bool:
        value = self._flag
        if not value:
            try:
                self._both_read.wait()
            except threading.BrokenBarrierError:
                pass
        return value

    @_closed.setter
    def _closed(self, value: bool) -> None:
        self._flag = value

    def __next__(self) -> Any:
        raise StopIteration

    def _get_state(self) -> State:
        return {}

    def _set_state(self, state: State) -> None:
        pass

    def _release(self) -> None:
        self.released += 1


def _on_threads(count: int, target: Any) -> None:
    threads = [threading.Thread(target=target) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert not any(thread.is_alive() for thread in threads)


def test_a_stage_closed_by_two_threads_at_once_is_released_once():
    stage = _Stage()
    _on_threads(2, stage.close)
    assert stage.released == 1


def test_the_second_close_waits_for_the_first():
    running, release = threading.Event(), threading.Event()

    def held(x: Any) -> Any:
        running.set()
        release.wait(20)
        return x

    options = fl.Options(threading=fl.ThreadingOptions(close_timeout=20))
    ds = fl.Dataset.range(100).map(held, num_parallel_calls=2, executor="thread") \
        .with_options(options)
    before = set(feedline_threads())
    it = iter(ds)
    consumer = threading.Thread(target=lambda: list(it))
    consumer.start()
    assert running.wait(20)
    closes = [threading.Thread(target=it.close) for _ in range(2)]
    for close in closes:
        close.start()
    # One close waits for the call still running; the other must wait for that close.
    closes[0].join(0.5)
    closes[1].join(0.5)
    assert closes[0].is_alive() and closes[1].is_alive()
    release.set()
    for thread in [*closes, consumer]:
        thread.join(20)
        assert not thread.is_alive()
    assert [t for t in feedline_threads() if t not in before] == []
