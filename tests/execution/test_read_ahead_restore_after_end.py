"""A reader restored after its end waits for every task still pulling from its source.

At the end, the reader drops its window without waiting (nothing more is wanted), but a
task queued behind the one that saw the end may already be pulling from the source. A
restore that loaded the source's state meanwhile raced that pull: the pull could take the
first element of the restored source, number it, and hand it to nobody.
"""

from __future__ import annotations

import threading

import pytest

from feedline.execution.executor import ThreadExecutor
from feedline.execution.read_ahead import SequentialReader
from feedline.testing import no_leaked_threads

TIMEOUT = 30


class _EndsSlowlyTheSecondTime:
    """``count`` elements; the second pull after the end blocks until ``release`` (a slow
    source), and a state loaded during any pull is recorded."""

    def __init__(self, count: int) -> None:
        self.count, self.position, self.ends = count, 0, 0
        self.pulling_after_end = threading.Event()
        self.release = threading.Event()
        self.in_pull = False
        self.loaded_during_a_pull = 0

    def __next__(self) -> int:
        self.in_pull = True
        try:
            if self.position < self.count:
                self.position += 1
                return self.position - 1
            self.ends += 1
            if self.ends == 2:
                self.pulling_after_end.set()
                self.release.wait(TIMEOUT)
            raise StopIteration
        finally:
            self.in_pull = False

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.loaded_during_a_pull += self.in_pull
        self.position = state["position"]


def _drain(reader: SequentialReader) -> list[int]:
    out = []
    while True:
        try:
            out.append(reader.next())
        except StopIteration:
            return out


@pytest.mark.timeout(TIMEOUT)
def test_discard_after_the_end_waits_for_a_task_still_pulling():
    source = _EndsSlowlyTheSecondTime(6)
    with no_leaked_threads():
        # Capacity 2: one item per task and a task per hand-out, so that when the consumer
        # has item 5, tasks for items 6 and 7 are queued: 6 sees the end, 7 pulls again.
        reader = SequentialReader("test-stage", source,
                                  lambda: ThreadExecutor(1, "test-stage", 5.0), 2)
        start = reader.position()
        assert [reader.next() for _ in range(6)] == list(range(6))
        assert source.pulling_after_end.wait(TIMEOUT)
        with pytest.raises(StopIteration):
            reader.next()
        # Released later, from elsewhere: discard() must still be waiting then.
        timer = threading.Timer(0.2, source.release.set)
        timer.start()
        reader.discard()
        assert source.release.is_set() and not source.in_pull
        reader.restore(start)
        assert _drain(reader) == list(range(6))
        reader.shutdown()
        timer.join(TIMEOUT)
    assert source.loaded_during_a_pull == 0
