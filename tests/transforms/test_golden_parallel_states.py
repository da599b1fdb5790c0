"""Checkpoints of parallel map, batch and map_and_batch written by an earlier version restore
and go on with exactly the elements that were left.

The states under ``tests/data/golden_states/`` were written mid-epoch, with tasks in flight
in the stage's read-ahead window (and, for one, an input error read ahead and not raised
yet): positions whose layout every version must keep reading. Regenerate them only on
purpose, from the version whose states they should pin, under the module name pytest
imports this file by (a callable object's fingerprint names its module)::

    cd tests/transforms && PYTHONPATH=../.. python -c \
        "import test_golden_parallel_states as t; t._write()"
"""

from __future__ import annotations

import json
import pathlib
import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import feedline as fl
from feedline.testing.failures import Failed, take_outcomes
from feedline.testing.threads import no_leaked_threads
from feedline.transforms.map_and_batch import NOT_BATCHED

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "data" / "golden_states"

PLAIN = fl.Options(optimization=fl.OptimizationOptions(
    inject_prefetch=False, map_vectorization=False, map_fusion=False))


def _times_ten(x: Any) -> Any:
    return x * 10


def _late_two(x: Any) -> Any:
    # Element 2 finishes after the ones behind it: an unordered map hands those out first.
    if int(x) == 2:
        threading.Event().wait(0.2)
    return x * 10


def _fails_at_12(x: Any) -> Any:
    if int(x) == 12:
        raise ValueError("input 12 fails")
    return x


class _Square:
    """x * x as an array, with a batch form (so ``map(...).batch(...)`` fuses)."""

    def __repr__(self) -> str:  # what the pipeline's fingerprint reads: no address
        return "_Square()"

    def __call__(self, x: Any) -> Any:
        return np.full((2,), int(x) ** 2, np.int64)

    def feedline_batch_form(self, xs: list[Any]) -> Any:
        values = [int(x) for x in xs]
        if 13 in values:
            return NOT_BATCHED  # this batch goes element by element
        return np.repeat(np.square(np.asarray(values, np.int64))[:, None], 2, axis=1)


PIPELINES: dict[str, tuple[Callable[[], fl.Dataset], int, bool]] = {
    # name: (pipeline, elements taken before the state, ordered)
    "map_deterministic": (
        lambda: fl.Dataset.range(40).map(_times_ten, num_parallel_calls=4), 7, True),
    "map_unordered": (
        lambda: fl.Dataset.range(30).map(_late_two, num_parallel_calls=4,
                                         deterministic=False), 6, False),
    "map_input_error_read_ahead": (
        lambda: fl.Dataset.range(30).map(_fails_at_12).map(_times_ten,
                                                           num_parallel_calls=4), 10, True),
    "map_then_parallel_batch": (
        lambda: fl.Dataset.range(50).map(_times_ten, num_parallel_calls=4)
        .batch(4, num_parallel_calls=2), 3, True),
    "map_and_batch_fused": (
        lambda: fl.Dataset.range(40).map(_Square(), num_parallel_calls=2).batch(3), 3, True),
    "map_and_batch_fused_by_element": (
        lambda: fl.Dataset.range(40).map(_Square(), num_parallel_calls=2).batch(3), 5, True),
}


def _plain(outcome: Any) -> Any:
    if isinstance(outcome, Failed):
        return f"error:{outcome.error_type}"
    return np.asarray(outcome).tolist()


def _write() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, (make, taken, ordered) in PIPELINES.items():
        ds = make().with_options(PLAIN)
        everything = [_plain(o) for o in take_outcomes(iter(ds))]
        with iter(ds) as it:
            first = [_plain(o) for o in take_outcomes(it, taken)]
            state = it.state_dict()
            root_state = it._root.state_dict()
            rest = [_plain(o) for o in take_outcomes(it)]
        if not ordered:
            assert sorted(map(repr, first + rest)) == sorted(map(repr, everything))
        else:
            assert first + rest == everything
        (GOLDEN / f"{name}.json").write_text(json.dumps(
            {"state": state, "root_state": root_state, "first": first, "rest": rest},
            indent=1, sort_keys=True))


def _golden(name: str) -> dict[str, Any]:
    return json.loads((GOLDEN / f"{name}.json").read_text())


def _rest(it: Any) -> list[Any]:
    return [_plain(o) for o in take_outcomes(it)]


@pytest.mark.timeout(60)
@pytest.mark.skipif(sys.version_info[:2] != (3, 11),
                    reason="a pipeline's fingerprint hashes its functions' bytecode, which "
                           "differs between CPython versions; these states were written by 3.11 "
                           "(the stage states below restore on any version)")
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_a_pipeline_state_from_before_restores_the_exact_rest(name):
    make, _, ordered = PIPELINES[name]
    golden = _golden(name)
    with no_leaked_threads(), iter(make().with_options(PLAIN)) as it:
        it.load_state_dict(golden["state"])
        rest = _rest(it)
    if ordered:
        assert rest == golden["rest"]
    else:
        assert sorted(map(repr, rest)) == sorted(map(repr, golden["rest"]))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_a_stage_state_from_before_restores_the_exact_rest(name):
    # The root stage's own state (no pipeline seal): its position layout is what is pinned.
    make, _, ordered = PIPELINES[name]
    golden = _golden(name)
    with no_leaked_threads(), iter(make().with_options(PLAIN)) as it:
        it._root.load_state_dict(golden["root_state"])
        rest = _rest(it)
    if ordered:
        assert rest == golden["rest"]
    else:
        assert sorted(map(repr, rest)) == sorted(map(repr, golden["rest"]))


def test_the_golden_states_hold_tasks_in_flight_and_a_pending_input_error():
    # What makes them worth pinning: a window part-way, not an idle stage's position.
    unordered = _golden("map_unordered")["root_state"]
    assert unordered["done"], unordered  # handed out past the first one still in flight
    error = _golden("map_input_error_read_ahead")["root_state"]
    assert [item for item, _ in error["errors"]] == [12]
