"""The single-input stage bases (feedline.core.unary) and the state layout they must keep."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline.core import pipeline_state
from feedline.core.fingerprint import PipelineFingerprint
from feedline.core.iterator import IteratorContext
from feedline.core.unary import INPUT_KEY, UnaryDataset, UnaryIterator, require_callable
from feedline.testing import assert_elements_equal, check_checkpointing


def _odd(x):
    return x % 2 == 1


def _running_sum(total, x):
    return total + x, total + x


def _below(x):
    return x < 200


def _same_window(window):
    return window


def golden_pipelines() -> dict[str, fl.Dataset]:
    """Pipelines of the single-input stages whose states are pinned in unary_states.json."""
    rows = fl.Dataset.from_tensor_slices(np.arange(24).reshape(8, 3))
    return {
        "chain": (fl.Dataset.range(40).filter(_odd).skip(1).take(30).enumerate(3).shard(2, 1)
                  .shuffle(4, seed=7).repeat(2).ignore_errors()),
        "rows": (rows.rebatch(5).unbatch().scan(np.int64(0), _running_sum).take_while(_below)
                 .unique().window(3, 2).flat_map(_same_window).padded_batch(2).cache()),
    }


GOLDEN_STEPS = (0, 1, 3, 7)
GOLDEN = Path(__file__).with_name("unary_states.json")
"""The root states of :func:`golden_pipelines` after ``GOLDEN_STEPS`` elements, as written by
feedline at commit c3e5a05, before the stages adopted the bases (never regenerate it: it pins
the layout old checkpoints have)."""


def _root_after(ds: fl.Dataset, steps: int) -> dict:
    # Pinned at epoch 0 each time, as when the golden states were written (iter() would go
    # on to the shuffle's next epoch).
    with fl.PipelineIterator(ds) as it:
        for _ in range(steps):
            next(it)
        return it.state_dict()["root"]


def _with_shuffle_version_2(state):
    """``state`` as the shuffle stages write it since version 2: a buffer by value has
    ``positions`` of nothing to read again (the one deliberate change since c3e5a05)."""
    if not isinstance(state, dict):
        return state
    out = {}
    for key, value in state.items():
        out[key] = _with_shuffle_version_2(value)
        if state.get("type") == "ShuffleIterator":
            if key == "version":
                out[key] = 2
            if key == "buffer":
                out["positions"] = {"replay": 0, "numbers": []}
    return out


@pytest.mark.usefixtures("shuffle_buffers_by_value")
@pytest.mark.parametrize("name", ["chain", "rows"])
def test_states_keep_the_layout_written_before_the_base_classes(name):
    # unary_states.json was written by feedline before the stages adopted UnaryDataset /
    # UnaryIterator: the states must stay the same, key order included, so old checkpoints
    # load. The shuffle's version 2 (positions) is the one change, made on purpose.
    golden = json.loads(GOLDEN.read_text())[name]
    ds = golden_pipelines()[name]
    for steps in GOLDEN_STEPS:
        assert json.dumps(_root_after(ds, steps)) == json.dumps(
            _with_shuffle_version_2(golden[str(steps)])), steps


@pytest.mark.parametrize("name", ["chain", "rows"])
def test_old_states_load_and_continue(name):
    golden = json.loads(GOLDEN.read_text())[name]
    reference = list(golden_pipelines()[name])
    for steps in GOLDEN_STEPS:
        ds = golden_pipelines()[name]  # a new cache stage: restored as in a new process
        sealed = pipeline_state.seal(golden[str(steps)], PipelineFingerprint.of(ds))
        with iter(ds) as it:
            it.load_state_dict(json.loads(json.dumps(sealed)))
            assert_elements_equal(list(it), reference[steps:], f"restored after {steps}")


def test_require_callable_returns_the_function_or_names_the_argument():
    assert require_callable(abs, "map()", "map_func") is abs
    with pytest.raises(TypeError, match=r"^scan\(\) needs a callable scan_func, got int$"):
        require_callable(3, "scan()", "scan_func")
    with pytest.raises(TypeError, match="callable generator returning an iterable, got list"):
        require_callable([], "from_generator()", "generator", " returning an iterable")


@pytest.mark.parametrize("build", [
    lambda ds: ds.filter("f"),
    lambda ds: ds.flat_map("f"),
    lambda ds: ds.take_while("f"),
    lambda ds: ds.scan(0, "f"),
    lambda ds: fl.Dataset.from_generator("f"),
])
def test_stages_taking_functions_refuse_non_callables(build):
    with pytest.raises(TypeError, match=r"\(\) needs a callable \w+.*, got str"):
        build(fl.Dataset.range(3))


class _Identity(UnaryDataset):
    def _make_iterator(self, ctx):
        return _Counting(ctx, self._make_input_iterator(ctx))


class _Counting(UnaryIterator):
    def __init__(self, ctx, upstream):
        super().__init__(ctx, upstream)
        self._n = 0

    def __next__(self):
        element = next(self._upstream)
        self._n += 1
        return element

    def _get_state(self):
        return self._with_input_state({"n": self._n})

    def _set_state(self, state):
        self._load_input_state(state)
        self._n = state["n"]


def test_unary_dataset_passes_spec_and_cardinality_through_and_follows_rewrites():
    source = fl.Dataset.range(5).batch(2)
    ds = _Identity(source)
    assert ds.input_dataset is source
    assert ds.cardinality() == 3
    assert ds.element_spec == source.element_spec
    other = fl.Dataset.range(7)
    rewritten = ds._with_inputs([other])
    assert rewritten.input_dataset is other and rewritten.cardinality() == 7
    assert "input_dataset" not in vars(ds)  # nodes add nothing the fingerprint would see


def test_unary_iterator_nests_the_input_state_last_and_restores_it():
    ds = _Identity(fl.Dataset.range(6))
    it = iter(ds)
    next(it), next(it)
    state = it.state_dict()
    assert list(state["root"]) == ["type", "version", "n", INPUT_KEY]
    assert state["root"][INPUT_KEY]["position"] == 2
    check_checkpointing(ds)
    it.close()


def test_set_upstream_makes_close_reach_the_new_input():
    ctx = IteratorContext()
    first = fl.Dataset.range(3)._make_iterator(ctx)
    it = _Counting(ctx, first)
    second = fl.Dataset.range(3)._make_iterator(ctx)
    first.close()
    it._set_upstream(second)
    assert it._inputs == [second] and it._upstream is second
    it.close()
    assert second._closed


def test_every_single_input_transform_uses_the_bases():
    # The stages of this package that read one input: a new one should use the bases too.
    from feedline.transforms import (
        cache,
        enumerate,
        filter,
        flat_map,
        ignore_errors,
        padded_batch,
        rebatch,
        repeat,
        scan,
        shard,
        shuffle,
        skip,
        take,
        take_while,
        unbatch,
        unique,
        window,
        with_options,
    )

    modules = [cache, enumerate, filter, flat_map, ignore_errors, padded_batch, rebatch, repeat,
               scan, shard, shuffle, skip, take, take_while, unbatch, unique, window,
               with_options]
    for module in modules:
        nodes = [v for k, v in vars(module).items()
                 if k.endswith("Dataset") and isinstance(v, type) and v.__module__ == module.__name__
                 and k != "ElementListDataset"]
        assert nodes and all(issubclass(n, UnaryDataset) for n in nodes), module.__name__
