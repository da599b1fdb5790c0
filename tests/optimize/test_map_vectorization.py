"""Map vectorization gives exactly the element-by-element results, errors and states."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.optimize import map_vectorization
from feedline.optimize.map_fusion import fuse_maps
from feedline.optimize.map_vectorization import (
    VectorizedRangeDataset,
    is_elementwise,
    vectorize_maps,
)

OFFSET = 7
OFF = fl.Options(optimization=fl.OptimizationOptions(map_vectorization=False))


def test_elementwise_functions_are_recognized():
    assert is_elementwise(lambda x: x + 1)
    assert is_elementwise(lambda x: x % 2 == 0)
    assert is_elementwise(lambda x: (x * 3 - 1) // 2 ** 3)
    assert is_elementwise(lambda x: -x ^ 5 | 3 & ~x)
    assert is_elementwise(lambda x: x / 2.5 >= 1)
    assert is_elementwise(lambda x: x)

    def named(value):
        return value << 2

    assert is_elementwise(named)


@pytest.mark.parametrize("fn", [
    lambda x: 1,  # a constant: not an array of the input's shape
    lambda x: abs(x),  # a call
    lambda x: x.sum(),  # an attribute
    lambda x: x[0],  # a subscript
    lambda x: x + OFFSET,  # a global: it may change
    lambda x: 0 < x < 5,  # a chained comparison: a branch
    lambda x: x > 1 and x < 4,  # a branch
    lambda x: not x,  # truth of an array
    lambda x: x is None,
    lambda x: x + "a",  # a non-numeric constant
    lambda x: x + 1180591620717411303424,  # a constant outside int64
    lambda x, y=1: x + y,  # a default
    lambda *x: x,
    np.negative,
    print,
], ids=lambda fn: getattr(fn, "__name__", "fn"))
def test_other_functions_are_not(fn):
    assert not is_elementwise(fn)


def test_closures_are_not_elementwise():
    k = 3
    assert not is_elementwise(lambda x: x + k)


def iterate(dataset: fl.Dataset, vectorized: bool) -> list:
    graph = fuse_maps(dataset)
    if vectorized:
        graph = vectorize_maps(graph)
        assert isinstance(graph, VectorizedRangeDataset)
    return outcomes(graph._make_iterator(IteratorContext()))


def outcomes(iterator) -> list:
    """Every element (as (type, dtype, value)) and every error (type, message, notes)."""
    out = []
    while True:
        try:
            element = next(iterator)
        except StopIteration:
            return out
        except Exception as error:  # noqa: BLE001 - compared in place
            out.append(("error", type(error).__name__, str(error),
                        tuple(getattr(error, "__notes__", ()))))
            continue
        out.append((type(element).__name__, str(getattr(element, "dtype", "")),
                    element.tolist() if isinstance(element, np.ndarray) else element.item()))


PIPELINES = {
    "map": lambda ds: ds.map(lambda x: x * 3 + 1),
    "filter": lambda ds: ds.filter(lambda x: x % 3 == 0),
    "map-filter": lambda ds: ds.map(lambda x: x + 1).filter(lambda x: x % 2 == 0),
    "filter-map-filter": lambda ds: ds.filter(lambda x: x % 5 != 0).map(lambda x: x // 3)
    .filter(lambda x: x & 1 == 1),
    "float": lambda ds: ds.map(lambda x: x / 4).filter(lambda x: x > 10.5),
    "to-bool": lambda ds: ds.map(lambda x: x % 7 < 3),
    "sparse": lambda ds: ds.filter(lambda x: x % 1500 == 1),
    "none-survive": lambda ds: ds.filter(lambda x: x < 0),
}


@pytest.mark.parametrize("source", [(0,), (3000,), (10, 5000, 3), (5000, -20, -7)])
@pytest.mark.parametrize("name", PIPELINES)
@pytest.mark.parametrize("batch", [None, 1, 256, (100, True), 5000])
@pytest.mark.slow
def test_same_elements_as_element_by_element(source, name, batch):
    dataset = PIPELINES[name](fl.Dataset.range(*source))
    if batch is not None:
        size, drop = batch if isinstance(batch, tuple) else (batch, False)
        dataset = dataset.batch(size, drop_remainder=drop)
    assert iterate(dataset, vectorized=True) == iterate(dataset, vectorized=False)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int16])
def test_other_range_dtypes(dtype):
    # uint8 * 2 overflows: values wrap alike; only the scalar path also warns (documented).
    dataset = fl.Dataset.range(200, dtype=dtype).map(lambda x: x * 2).filter(lambda x: x > 9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert iterate(dataset, True) == iterate(dataset, False)
        assert iterate(dataset.batch(64), True) == iterate(dataset.batch(64), False)


@pytest.mark.parametrize("batch", [None, 10])
def test_numpy_error_conditions_run_element_by_element(batch):
    # Division by zero at one element: the scalar path warns for that element; so does the
    # fallback, and every value is the same.
    dataset = fl.Dataset.range(-1500, 1500).map(lambda x: 100 // x).filter(lambda x: x != 3)
    if batch:
        dataset = dataset.batch(batch)
    with warnings.catch_warnings(record=True) as vectorized_warnings:
        warnings.simplefilter("always")
        vectorized = iterate(dataset, True)
    with warnings.catch_warnings(record=True) as scalar_warnings:
        warnings.simplefilter("always")
        scalar = iterate(dataset, False)
    assert vectorized == scalar
    assert [str(w.message) for w in vectorized_warnings] == \
        [str(w.message) for w in scalar_warnings]


def test_exceptions_are_raised_in_place_with_the_stage_and_index():
    # A negative power of an integer raises in NumPy, on scalars and arrays alike.
    dataset = fl.Dataset.range(-3, 3000).map(lambda x: x + 0).map(lambda x: 2 ** x)
    result = iterate(dataset, True)
    assert result == iterate(dataset, False)
    assert [r[1] for r in result[:3]] == ["ValueError"] * 3 and result[3][0] == "int64"
    assert any("input element 0" in note for note in result[0][3])


def test_integers_out_of_bounds_raise_as_element_by_element():
    # 2**70 is computed when called (too large to fold): the OverflowError comes per element.
    dataset = fl.Dataset.range(3).map(lambda x: x + 2**70)
    result = iterate(dataset, True)
    assert result == iterate(dataset, False)
    assert [r[1] for r in result] == ["OverflowError"] * 3


def test_a_non_boolean_predicate_is_the_usual_type_error():
    dataset = fl.Dataset.range(5).filter(lambda x: x % 2)
    result = iterate(dataset, True)
    assert result == iterate(dataset, False)
    assert result[0][:2] == ("error", "TypeError") and "must return a bool" in result[0][2]


def vectorized_iterator(dataset: fl.Dataset):
    return vectorize_maps(fuse_maps(dataset))._make_iterator(IteratorContext())


def scalar_iterator(dataset: fl.Dataset):
    return fuse_maps(dataset)._make_iterator(IteratorContext())


def remaining(iterator) -> list:
    return [r[2] for r in outcomes(iterator)]


@pytest.mark.parametrize("name", ["map", "filter", "filter-map-filter", "sparse"])
@pytest.mark.parametrize("batch", [None, 100])
@pytest.mark.slow
def test_states_are_the_element_by_element_ones_at_every_position(name, batch, monkeypatch):
    monkeypatch.setattr(map_vectorization, "CHUNK", 32)  # many chunk boundaries (62)
    dataset = PIPELINES[name](fl.Dataset.range(2000))
    if batch:
        dataset = dataset.batch(batch)
    expected = remaining(scalar_iterator(dataset))
    vectorized, scalar = vectorized_iterator(dataset), scalar_iterator(dataset)
    for position in range(len(expected) + 1):
        if position % 7 == 0 or position > len(expected) - 3:
            state = vectorized.state_dict()
            assert state == scalar.state_dict(), position
            # Either way round, the rest is the same.
            restored = scalar_iterator(dataset)
            restored.load_state_dict(state)
            assert remaining(restored) == expected[position:]
            restored = vectorized_iterator(dataset)
            restored.load_state_dict(scalar.state_dict())
            assert remaining(restored) == expected[position:]
        if position < len(expected):
            a, b = next(vectorized), next(scalar)
            assert np.array_equal(a, b)


def test_rewrite_applies_only_where_it_is_exact():
    def kept(dataset: fl.Dataset) -> bool:
        return not isinstance(vectorize_maps(fuse_maps(dataset)), VectorizedRangeDataset)

    # An explicit executor="process" pickles its function (an error of its own to keep).
    assert kept(fl.Dataset.range(10).map(lambda x: x + 1, num_parallel_calls=2,
                                         executor="process"))
    assert kept(fl.Dataset.range(10).map(abs))
    assert kept(fl.Dataset.from_tensor_slices([1, 2]).map(lambda x: x + 1))
    assert kept(fl.Dataset.range(10).map(lambda x: x + 1, num_parallel_calls=2).map(abs))
    assert kept(fl.Dataset.range(2**31, 2**31 + 2, dtype=np.int32).map(lambda x: x + 1))
    # Deeper in a graph: the rewritten part is found below other stages.
    graph = vectorize_maps(fuse_maps(fl.Dataset.range(10).map(lambda x: x + 1).batch(3)
                                     .map(lambda b: b.sum())))
    assert isinstance(graph._inputs[0], VectorizedRangeDataset)
    assert [int(x) for x in graph] == [6, 15, 24, 10]


@pytest.mark.parametrize("batch", [None, 64])
def test_checkpoints_load_with_vectorization_switched_on_or_off(batch):
    def build(vectorize: bool, fusion: bool = True) -> fl.Dataset:
        dataset = PIPELINES["filter-map-filter"](fl.Dataset.range(3000))
        if batch:
            dataset = dataset.batch(batch)
        optimization = fl.OptimizationOptions(map_vectorization=vectorize, map_fusion=fusion)
        return dataset.with_options(fl.Options(optimization=optimization))

    expected = [np.asarray(e).tolist() for e in build(False)]
    for saver, loader in [(True, False), (False, True), (True, True)]:
        for taken in (0, 1, 5, len(expected) - 1):
            with iter(build(saver)) as it:
                for _ in range(taken):
                    next(it)
                state = it.state_dict()
            with iter(build(loader)) as restored:
                restored.load_state_dict(state)
                assert [np.asarray(e).tolist() for e in restored] == expected[taken:]
    # Without fusion a lone map or filter over the range is still vectorized.
    assert [np.asarray(e).tolist() for e in build(True, fusion=False)] == expected


def test_check_checkpointing_on_a_vectorized_pipeline():
    from feedline.testing import check_checkpointing

    check_checkpointing(fl.Dataset.range(700).map(lambda x: x * 3).filter(lambda x: x % 4 == 1)
                        .batch(16))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("parallel", [4, fl.AUTOTUNE])
@pytest.mark.parametrize("batch", [None, 8])
def test_a_read_ahead_state_is_caught_up_element_by_element_then_vectorized(batch, parallel):
    def build(parallel: int | None) -> fl.Dataset:
        dataset = fl.Dataset.range(3000).map(lambda x: x * 3, num_parallel_calls=parallel)
        dataset = dataset.filter(lambda x: x % 2 == 0)
        return dataset.batch(batch, num_parallel_calls=parallel) if batch else dataset

    expected = [np.asarray(e).tolist() for e in build(None)]
    # Saved by the read-ahead stages themselves: vectorization off.
    with iter(build(parallel).with_options(OFF)) as it:
        assert type(it._root).__name__ != "VectorizedRangeIterator"
        taken = [np.asarray(next(it)).tolist() for _ in range(17)]
        state = it.state_dict()
    for loader in (None, parallel):  # both vectorized
        with iter(build(loader)) as restored:
            restored.load_state_dict(state)
            assert restored._root._catching_up  # a state with elements to re-read
            assert taken + [np.asarray(e).tolist() for e in restored] == expected


# ---------------------------------------------------------------- num_parallel_calls
# A map or batch with num_parallel_calls (AUTOTUNE, a number, deterministic or not) is
# vectorized as the inline one is: same elements, errors and checkpoints as the graph as
# written, which then runs on threads.

A = fl.AUTOTUNE


def parallel_pipeline(calls, deterministic=None):
    def build(ds: fl.Dataset) -> fl.Dataset:
        return (ds.filter(lambda x: x % 5 != 0)
                .map(lambda x: x // 3, num_parallel_calls=calls, deterministic=deterministic)
                .map(lambda x: x * 7)  # inline beside a parallel one: fused, then vectorized
                .filter(lambda x: x & 1 == 1))
    return build


def as_written(dataset: fl.Dataset) -> list:
    """Outcomes of the graph as written (vectorization off: the maps run on threads)."""
    with iter(dataset.with_options(OFF)) as it:
        assert type(it._root).__name__ != "VectorizedRangeIterator"
        return outcomes(it)


def vectorized(dataset: fl.Dataset) -> list:
    with iter(dataset) as it:
        assert type(it._root).__name__ == "VectorizedRangeIterator"
        return outcomes(it)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("calls", [A, 3])
@pytest.mark.parametrize("batch", [None, (100, None), (64, A), (7, 2)])
def test_parallel_stages_are_vectorized_with_the_same_elements(calls, batch):
    for source in [(0,), (3000,), (5000, -20, -7)]:
        dataset = parallel_pipeline(calls)(fl.Dataset.range(*source))
        if batch:
            dataset = dataset.batch(batch[0], num_parallel_calls=batch[1])
        assert vectorized(dataset) == as_written(dataset)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("calls", [A, 2])
def test_a_lone_parallel_map_or_batch_is_vectorized(calls):
    dataset = fl.Dataset.range(-700, 2300).map(lambda x: x * 3 + 1, num_parallel_calls=calls)
    assert vectorized(dataset) == as_written(dataset)
    dataset = dataset.batch(256, num_parallel_calls=calls)
    assert vectorized(dataset) == as_written(dataset)
    graph = vectorize_maps(fuse_maps(dataset))
    # The element-by-element graph it falls back on runs inline (no thread per chunk).
    assert graph.replaced.num_parallel_calls is None
    assert graph.replaced._inputs[0].num_parallel_calls is None


@pytest.mark.timeout(60)
def test_a_parallel_map_s_errors_are_those_of_the_graph_as_written():
    dataset = (fl.Dataset.range(-3, 3000).map(lambda x: x + 0, num_parallel_calls=A)
               .map(lambda x: 2 ** x, num_parallel_calls=A))
    result = vectorized(dataset)
    assert result == as_written(dataset)
    assert [r[1] for r in result[:3]] == ["ValueError"] * 3 and result[3][0] == "int64"
    assert any("input element 0" in note for note in result[0][3])


@pytest.mark.timeout(60)
def test_an_unordered_parallel_map_is_vectorized_in_order():
    # deterministic=False allows any order; input order is one of them (and the rewrite's).
    dataset = parallel_pipeline(A, deterministic=False)(fl.Dataset.range(5000)).batch(64)
    ordered = parallel_pipeline(A)(fl.Dataset.range(5000)).batch(64)
    assert vectorized(dataset) == vectorized(ordered) == as_written(ordered)
    unordered = [value for r in as_written(dataset) for value in r[2]]
    assert sorted(unordered) == [value for r in as_written(ordered) for value in r[2]]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("calls,deterministic", [(A, None), (A, False), (3, None)])
@pytest.mark.parametrize("batch", [None, 64])
@pytest.mark.slow
def test_parallel_checkpoints_load_with_vectorization_switched_on_or_off(
        calls, deterministic, batch):
    def build(vectorize: bool) -> fl.Dataset:
        dataset = parallel_pipeline(calls, deterministic)(fl.Dataset.range(3000))
        if batch:
            dataset = dataset.batch(batch, num_parallel_calls=calls)
        optimization = fl.OptimizationOptions(map_vectorization=vectorize)
        return dataset.with_options(fl.Options(optimization=optimization))

    def values(elements) -> list:
        out = [np.asarray(e).tolist() for e in elements]
        return [v for b in out for v in b] if batch else out

    expected = values(build(True))
    assert sorted(expected) == sorted(values(build(False)))
    for saver, loader in [(True, False), (False, True), (True, True), (False, False)]:
        for taken in (0, 1, 5, 16):
            with iter(build(saver)) as it:
                head = values(next(it) for _ in range(taken))
                state = it.state_dict()
            with iter(build(loader)) as restored:
                restored.load_state_dict(state)
                rest = values(restored)
            got = head + rest
            if deterministic is False and not (saver and loader):
                # An unordered run on threads: each element once, in some order.
                assert sorted(got) == sorted(expected), (saver, loader, taken)
            else:
                assert got == expected, (saver, loader, taken)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("batch", [None, 100])
@pytest.mark.slow
def test_parallel_states_load_both_ways_at_every_position(batch, monkeypatch):
    monkeypatch.setattr(map_vectorization, "CHUNK", 32)  # many chunk boundaries
    dataset = parallel_pipeline(A)(fl.Dataset.range(2000))
    if batch:
        dataset = dataset.batch(batch, num_parallel_calls=A)
    expected = [r[2] for r in vectorized(dataset)]
    with iter(dataset) as fast, iter(dataset.with_options(OFF)) as written:
        for position in range(len(expected) + 1):
            if position % 9 == 0 or position > len(expected) - 3:
                for state, loader in [(fast.state_dict(), dataset.with_options(OFF)),
                                      (written.state_dict(), dataset)]:
                    with iter(loader) as restored:
                        restored.load_state_dict(state)
                        assert [r[2] for r in outcomes(restored)] == expected[position:]
            if position < len(expected):
                assert np.array_equal(next(fast), next(written))


@pytest.mark.parametrize("switch", ["map_vectorization", "map_fusion"])
def test_parallel_maps_follow_the_option_switches(switch):
    dataset = parallel_pipeline(A)(fl.Dataset.range(3000)).batch(32, num_parallel_calls=A)
    options = fl.Options(optimization=fl.OptimizationOptions(**{switch: False}))
    with iter(dataset.with_options(options)) as it:
        rewritten = type(it._root).__name__ == "VectorizedRangeIterator"
        assert [np.asarray(e).tolist() for e in it] == \
            [r[2] for r in vectorized(dataset)]
    # Vectorization is its own switch; fusion off leaves it on (a chain is vectorized whole).
    assert rewritten == (switch == "map_fusion")
