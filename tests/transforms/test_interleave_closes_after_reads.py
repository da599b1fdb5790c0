"""Parallel interleave closes a dataset that ended only once no read is pulling from it.

Each open dataset is read ahead by tasks on its strand (one at a time). When the consumer
takes a dataset's end, a task queued behind the one that saw the end may already be
pulling from the dataset again (a read after the end). The stage used to close the dataset
right away, on the consumer's thread, while that read ran ``next()`` on it: two threads in
one iterator at once (a generator raises "generator already executing", a file reader's
file is closed under it). The slot's reads are counted now, and the last read to return
closes the dataset when the consumer asked for it meanwhile.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import feedline as fl
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.unary import UnaryDataset
from feedline.testing import no_leaked_threads

TIMEOUT = 30


class _Probe:
    """What the controlled dataset saw: the second pull after its end blocks until
    ``release``; a close records whether a pull was running then (and releases it, so
    that the old behaviour fails rather than hangs)."""

    def __init__(self, block_after_end: bool = True) -> None:
        self.block_after_end = block_after_end
        self.ends = 0
        self.pulling = 0  # pulls in progress
        self.pulling_after_end = threading.Event()
        self.release = threading.Event()
        self.closed = threading.Event()
        self.closes = 0
        self.closed_during_a_pull = False


class _Controlled(UnaryDataset):
    def __init__(self, input_dataset: fl.Dataset, probe: _Probe) -> None:
        super().__init__(input_dataset)
        self._probe = probe

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        return _ControlledIterator(ctx, self.input_dataset._make_iterator(ctx), self._probe)


class _ControlledIterator(DatasetIterator):
    def __init__(self, ctx: IteratorContext, upstream: DatasetIterator, probe: _Probe) -> None:
        super().__init__(ctx, [upstream])
        self._upstream = upstream
        self._probe = probe

    def __next__(self) -> Any:
        probe = self._probe
        probe.pulling += 1
        try:
            try:
                return next(self._upstream)
            except StopIteration:
                probe.ends += 1
                if probe.ends == 2 and probe.block_after_end:  # a read after the end
                    probe.pulling_after_end.set()
                    assert probe.release.wait(TIMEOUT)
                raise
        finally:
            probe.pulling -= 1

    def _get_state(self) -> State:
        return {"input": self._upstream.state_dict()}

    def _set_state(self, state: State) -> None:
        self._upstream.load_state_dict(state["input"])

    def _release(self) -> None:
        probe = self._probe
        probe.closes += 1
        probe.closed_during_a_pull |= probe.pulling > 0
        probe.release.set()
        probe.closed.set()


@pytest.mark.timeout(2 * TIMEOUT)
@pytest.mark.parametrize("deterministic", [True, False])
def test_a_dataset_that_ended_is_closed_after_the_read_still_pulling_from_it(deterministic):
    probe = _Probe()
    # One input element: its dataset opens with a task reading 3 items (the read-ahead of
    # a dataset waiting to enter the cycle); entering the cycle queues a second task behind
    # it. The first task reads 0, 1 and the end; the second pulls again after the end.
    ds = fl.Dataset.range(1).interleave(
        lambda _: _Controlled(fl.Dataset.range(2), probe), cycle_length=2, block_length=1,
        num_parallel_calls=2, deterministic=deterministic)
    with no_leaked_threads():
        it = iter(ds)
        try:
            assert sorted(int(next(it)) for _ in range(2)) == [0, 1]
            assert probe.pulling_after_end.wait(TIMEOUT)
            # The consumer takes the end while the second task is still in its pull.
            with pytest.raises(StopIteration):
                next(it)
            assert not probe.closed_during_a_pull, "closed while a read was pulling from it"
            assert not probe.closed.is_set()  # left to the read still running
            probe.release.set()
            # The read returns and, the last one, closes the dataset.
            assert probe.closed.wait(TIMEOUT)
            assert probe.closes == 1 and not probe.closed_during_a_pull
        finally:
            probe.release.set()
            it.close()
    assert probe.closes == 1


@pytest.mark.timeout(2 * TIMEOUT)
@pytest.mark.parametrize("deterministic", [True, False])
def test_every_dataset_is_closed_once_and_never_during_a_read(deterministic):
    probes = [_Probe(block_after_end=False) for _ in range(8)]
    ds = fl.Dataset.range(len(probes)).interleave(
        lambda i: _Controlled(fl.Dataset.range(i), probes[int(i)]), cycle_length=3,
        block_length=1, num_parallel_calls=3, deterministic=deterministic)
    with no_leaked_threads(), iter(ds) as it:
        assert len([int(x) for x in it]) == sum(range(len(probes)))
    # Closing the pipeline waited for its threads: every close has happened.
    assert [p.closes for p in probes] == [1] * len(probes)
    assert not any(p.closed_during_a_pull for p in probes)
