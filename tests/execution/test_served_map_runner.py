"""A parallel map takes its runner from the factory placement serves (execution.map_runner)."""

from __future__ import annotations

import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.execution import map_runner as served
from feedline.placement import runner as placement_runner
from feedline.testing.threads import no_leaked_threads

pytestmark = pytest.mark.timeout(60)


def test_importing_feedline_serves_placements_map_runner():
    runner = served._make(IteratorContext(), abs, "map(abs)", 2, "process", stage_key=None)
    assert type(runner) is placement_runner.MapRunner and runner.kind == "process"


def test_a_parallel_map_asks_the_served_factory_for_its_runner():
    asked = []

    def make(ctx, fn, name, calls, executor, stage_key):
        asked.append((name, calls, executor))
        return placement_runner.map_runner(ctx, fn, name, calls, executor, stage_key=stage_key)

    before = served.serve_map_runners(make)
    try:
        ds = fl.Dataset.range(4).map(abs, num_parallel_calls=2, name="m")
        with no_leaked_threads():
            assert [int(x) for x in ds] == [0, 1, 2, 3]
    finally:
        served.serve_map_runners(before)
    assert asked == [("m", 2, None)]


def test_a_parallel_map_without_a_served_runner_says_so():
    before = served.serve_map_runners(None)
    try:
        with no_leaked_threads(), pytest.raises(RuntimeError,
                                                match="^no map runner is served: import feedline"):
            list(fl.Dataset.range(3).map(abs, num_parallel_calls=2))
    finally:
        served.serve_map_runners(before)
    assert [int(x) for x in fl.Dataset.range(3).map(abs, num_parallel_calls=2)] == [0, 1, 2]
