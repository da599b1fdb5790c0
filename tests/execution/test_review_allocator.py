"""Review of the allocator's give-back (issue 41.9): the count of open pipelines that decides
when the memory the malloc thresholds kept goes back to the kernel."""

from __future__ import annotations

import gc

import pytest

import feedline as fl
from feedline.execution import allocator
from feedline.pipeline import PipelineIterator


@pytest.fixture
def given_back(monkeypatch) -> list[int]:
    """Each give-back, recorded instead of made; no pipeline counted open to begin with."""
    gc.collect()  # pipelines other tests abandoned close now, not in the middle of a test
    calls: list[int] = []
    monkeypatch.setattr(allocator, "_give_back", lambda: calls.append(1))
    monkeypatch.setattr(allocator, "_outcome", "configured")
    monkeypatch.setattr(allocator, "_open_pipelines", 0)
    monkeypatch.setattr(allocator, "GIVE_BACK_AFTER_SECONDS", 0.0)
    return calls


def test_a_pipeline_that_fails_to_build_never_stops_the_give_back(given_back):
    # Every later close() of a last pipeline gave nothing back: the failed one stayed
    # counted open, so the process kept what the thresholds kept for the rest of its life.
    for epoch in (-1, "first"):
        with pytest.raises(ValueError, match="epoch"):
            PipelineIterator(fl.Dataset.range(3), epoch=epoch)
    gc.collect()
    with iter(fl.Dataset.range(3)) as it:
        assert list(it) == [0, 1, 2]
    assert given_back == [1]


def test_a_pipeline_never_closed_gives_back_when_collected(given_back):
    it = iter(fl.Dataset.range(10).map(lambda x: x + 1).prefetch(2))
    assert int(next(it)) == 1
    del it
    gc.collect()
    assert given_back == [1] and allocator._open_pipelines == 0


def test_pipelines_iterated_inside_another_give_back_once_it_closes(given_back):
    # A map function that runs a pipeline of its own, on the outer pipeline's threads.
    def total(x):
        return sum(int(v) for v in fl.Dataset.range(int(x)))

    with iter(fl.Dataset.range(6).map(total, num_parallel_calls=3)) as it:
        assert [int(v) for v in it] == [0, 0, 1, 3, 6, 10]
        assert given_back == []  # the outer one still runs
    assert given_back == [1] and allocator._open_pipelines == 0
