"""Checkpoints written by an earlier feedline restore: states saved before stages were
fingerprinted by operation name (``tests/data/checkpoints``, written at commit dd08c4f,
when a stage's digest named its class as ``module:qualname``) load and continue exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import feedline as fl

DATA = Path(__file__).parent.parent / "data" / "checkpoints"
TAKEN = 5
"""Elements taken before each golden state was saved."""
NEXT = 4
"""Elements recorded after it: what the restored iterator must produce."""

# No user functions: their digest is their bytecode, which changes with the Python version.
PIPELINES = {
    "shuffle_batch": lambda: fl.Dataset.range(50).shuffle(16, seed=5).batch(4).enumerate(),
    "zip_concatenate": lambda: fl.Dataset.zip(
        fl.Dataset.range(20), fl.Dataset.range(100, 120).skip(3)).concatenate(
        fl.Dataset.zip(fl.Dataset.range(5), fl.Dataset.range(5))).repeat(2),
    "batch_unbatch": lambda: fl.Dataset.range(30).batch(4).unbatch().take(20).cache(),
    "global_shuffle": lambda: fl.Dataset.range(128).global_shuffle(seed=9).batch(8, True)
    .prefetch(2),
}


def as_list(element: Any) -> Any:
    """An element as JSON: arrays as lists, tuples as lists."""
    if isinstance(element, tuple):
        return [as_list(e) for e in element]
    return np.asarray(element).tolist()


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_a_state_saved_before_operation_names_restores(name):
    expected = json.loads((DATA / "expected.json").read_text())[name]
    it = iter(PIPELINES[name]())
    it.load_state_dict(fl.load_state(DATA / f"{name}.state"))
    assert [as_list(next(it)) for _ in range(NEXT)] == expected
