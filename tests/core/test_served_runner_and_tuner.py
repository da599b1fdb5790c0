"""core reaches the runner and the tuner through what is served to it, never by importing
them (they sit above it): ``iter(dataset)`` and spec inference start the served runner, and a
pipeline's first ``autotuner()`` call builds the served tuner."""

from __future__ import annotations

import pytest

import feedline as fl
from feedline.autotune.tuner import Tuner
from feedline.core import runner
from feedline.core.iterator import IteratorContext, serve_tuners
from feedline.core.spec_inference import first_element_spec


class _Recorded:
    """A runner that runs the real one and notes how it was asked."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, dataset, **how):
        self.calls.append(how)
        return fl.PipelineIterator(dataset, **how)


@pytest.fixture
def recorded():
    served = _Recorded()
    before = runner.serve_runner(served)
    yield served
    runner.serve_runner(before)


def test_iterating_a_dataset_starts_the_served_runner(recorded):
    assert [int(x) for x in fl.Dataset.range(3)] == [0, 1, 2]
    assert recorded.calls == [{"epoch": 0, "continue_epochs": True}]


def test_spec_inference_starts_the_served_runner(recorded):
    assert first_element_spec(fl.Dataset.range(4).batch(3)) == fl.TensorSpec((3,), "int64")
    assert recorded.calls == [{"epoch": 0, "continue_epochs": False}]


def test_importing_feedline_serves_the_pipeline_iterator():
    before = runner.serve_runner(None)
    runner.serve_runner(before)
    assert before is fl.PipelineIterator
    assert type(iter(fl.Dataset.range(1))) is fl.PipelineIterator


def test_without_a_served_runner_running_is_a_clear_error():
    before = runner.serve_runner(None)
    try:
        with pytest.raises(RuntimeError, match="no pipeline runner is served"):
            iter(fl.Dataset.range(1))
    finally:
        runner.serve_runner(before)


class _Tuner:
    made = 0

    def __init__(self) -> None:
        type(self).made += 1
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def test_a_pipeline_builds_the_served_tuner_once_and_stops_it():
    before = serve_tuners(_Tuner)
    try:
        ctx = IteratorContext()
        tuner = ctx.autotuner()
        assert ctx.autotuner() is tuner and _Tuner.made == 1
        ctx.close_kept()
        assert tuner.stopped
    finally:
        serve_tuners(before)


def test_importing_feedline_serves_the_autotune_tuner():
    ctx = IteratorContext()
    assert type(ctx.autotuner()) is Tuner
    ctx.close_kept()


def test_without_a_served_tuner_autotune_is_a_clear_error():
    before = serve_tuners(None)
    try:
        with pytest.raises(RuntimeError, match="no tuner is served"):
            IteratorContext().autotuner()
    finally:
        serve_tuners(before)
