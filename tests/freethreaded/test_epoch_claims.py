"""Runs of one seeded shuffle started on two threads at once take two epochs."""

from __future__ import annotations

import threading

import feedline as fl
from feedline.core.seed_epochs import EpochCounter
from feedline.pipeline import PipelineIterator


def test_two_runs_started_at_once_take_two_epochs(monkeypatch):
    """The worst interleaving of reading the next epoch and advancing past it: both runs
    have chosen their epoch before either advances the counter."""
    barrier = threading.Barrier(2, timeout=2)
    original = EpochCounter.advance_past

    def after_both_chose(self: EpochCounter, epoch: int) -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass
        original(self, epoch)

    monkeypatch.setattr(EpochCounter, "advance_past", after_both_chose)
    ds = fl.Dataset.range(50).shuffle(50, seed=11)
    orders: list[tuple[int, ...]] = []
    threads = [threading.Thread(target=lambda: orders.append(tuple(int(x) for x in ds)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert not any(thread.is_alive() for thread in threads)
    monkeypatch.undo()
    epochs = {tuple(int(x) for x in PipelineIterator(ds, epoch=e)): e for e in range(2)}
    assert sorted(epochs[order] for order in orders) == [0, 1]
