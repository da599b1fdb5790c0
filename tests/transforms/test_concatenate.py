"""Dataset.concatenate: order, spec compatibility, cardinality, checkpoints."""

import json
import pickle
import sys

import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing, fail_at


def ints(ds):
    return [int(x) for x in ds]


def test_values_and_cardinality():
    ds = fl.Dataset.range(3).concatenate(fl.Dataset.range(10, 12))
    assert ints(ds) == [0, 1, 2, 10, 11]
    assert ds.cardinality() == 5 == len(ds)
    check_checkpointing(ds)


@pytest.mark.parametrize("first, second", [(0, 3), (3, 0), (0, 0)])
def test_empty_sides(first, second):
    ds = fl.Dataset.range(first).concatenate(fl.Dataset.range(100, 100 + second))
    assert ints(ds) == list(range(first)) + list(range(100, 100 + second))
    check_checkpointing(ds, epochs=3)


def test_chains_and_nests():
    a = fl.Dataset.from_tensor_slices({"k": [1, 2], "v": [b"a", b"b"]})
    b = fl.Dataset.from_tensors({"k": 3, "v": b"c"})
    ds = a.concatenate(b).concatenate(a)
    assert [(int(e["k"]), e["v"]) for e in ds] == [(1, b"a"), (2, b"b"), (3, b"c"), (1, b"a"),
                                                  (2, b"b")]
    assert ds.cardinality() == 5
    check_checkpointing(ds)


def test_cardinality_infinite_and_unknown():
    unknown = fl.Dataset.from_generator(lambda: iter(range(2)))
    infinite = fl.Dataset.range(1).repeat()
    assert fl.Dataset.range(2).concatenate(unknown).cardinality() == fl.UNKNOWN
    assert unknown.concatenate(infinite).cardinality() == fl.INFINITE
    assert infinite.concatenate(fl.Dataset.range(2)).cardinality() == fl.INFINITE


def test_structure_mismatch_is_an_error_when_built():
    with pytest.raises(fl.StructureError, match="different structures"):
        fl.Dataset.range(3).concatenate(fl.Dataset.from_tensors((1, 2)))
    with pytest.raises(fl.StructureError, match="different structures"):
        fl.Dataset.from_tensors({"a": 1}).concatenate(fl.Dataset.from_tensors({"b": 1}))


def test_dtype_mismatch_is_an_error_naming_the_leaf():
    a = fl.Dataset.from_tensors((1, np.zeros(2, np.float32)))
    b = fl.Dataset.from_tensors((1, np.zeros(2, np.float64)))
    with pytest.raises(fl.StructureError, match=r"leaf \[1\] has dtype float32.*float64"):
        a.concatenate(b)


def test_spec_relaxes_differing_dimensions():
    a = fl.Dataset.from_tensors(np.zeros((2, 3)))
    b = fl.Dataset.from_tensors(np.zeros((4, 3)))
    assert a.concatenate(b).element_spec == fl.TensorSpec((None, 3), np.dtype(np.float64))
    # Different ranks: allowed (tf.data gives an unknown rank); the spec comes from an element.
    c = a.concatenate(fl.Dataset.from_tensors(np.zeros(5)))
    assert [x.shape for x in c] == [(2, 3), (5,)]


def test_unknown_specs_are_not_checked_until_iteration():
    gen = fl.Dataset.from_generator(lambda: iter([(1, 2)]))
    ds = fl.Dataset.range(1).concatenate(gen)
    assert len(list(ds)) == 2


def test_not_a_dataset():
    with pytest.raises(TypeError, match="needs a Dataset"):
        fl.Dataset.range(2).concatenate([1, 2])


def test_state_records_the_input():
    it = iter(fl.Dataset.range(2).concatenate(fl.Dataset.range(5, 8)))
    assert [int(next(it)) for _ in range(3)] == [0, 1, 5]
    state = it.state_dict()["root"]
    assert state["type"] == "ConcatenateIterator" and state["index"] == 1
    assert [inner["position"] for inner in state["input"]] == [1]


def test_damaged_states_are_checkpoint_errors():
    ds = fl.Dataset.range(2).concatenate(fl.Dataset.range(5, 8))
    with iter(ds) as it:
        next(it)
        good = it.state_dict()
    for index, inner in [(2, None), (-1, None), (True, None), (0, []), (0, "x")]:
        root = dict(good["root"], index=index)
        if inner is not None:
            root["input"] = inner
        with iter(ds) as it, pytest.raises(fl.CheckpointError):
            it._root.load_state_dict(root)


# ------------------------------------------------- long chains (one dataset per file, say)
N = 10_000


@pytest.fixture
def default_recursion_limit():
    """Python's default limit (tests/conftest.py raises it), so nothing may recurse per input."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(limit)


def chain(kind: str) -> fl.Dataset:
    """``range(i, i + 1)`` for i < N, concatenated left to right, right to left, or as a tree."""
    parts = [fl.Dataset.range(i, i + 1) for i in range(N)]
    if kind == "left":
        ds = parts[0]
        for part in parts[1:]:
            ds = ds.concatenate(part)
        return ds
    if kind == "right":
        ds = parts[-1]
        for part in reversed(parts[:-1]):
            ds = part.concatenate(ds)
        return ds
    while len(parts) > 1:  # pairwise, as a reduction over a list of files may build it
        parts = [parts[i].concatenate(parts[i + 1]) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    return parts[0]


def plus_one(x):
    return x + 1


def twice(x):
    return x * 2


@pytest.mark.parametrize("kind", ["left", "right", "tree"])
def test_ten_thousand_concatenations(kind, default_recursion_limit):
    ds = chain(kind)
    assert len(ds._inputs) == N  # one node
    assert ds.cardinality() == N == len(ds)
    assert ds.element_spec == fl.TensorSpec((), np.dtype(np.int64))
    assert ds.options() == fl.Options()
    assert ints(ds) == list(range(N))
    # Pickled (datasets are picklable) and rewritten by the optimizer (map fusion) alike.
    assert ints(pickle.loads(pickle.dumps(ds.map(plus_one).map(twice)))) == [
        (x + 1) * 2 for x in range(N)]


# slow: a checkpoint fingerprints the graph, about a second per 10,000 stages.
@pytest.mark.slow
def test_ten_thousand_concatenations_checkpoint(default_recursion_limit):
    ds = chain("tree").concatenate(chain("right"))
    assert len(ds._inputs) == 2 * N
    # A checkpoint in the middle, restored into a new iterator (through JSON).
    with iter(ds) as it:
        assert ints(next(it) for _ in range(N + 6_001)) == list(range(N)) + list(range(6_001))
        state = json.loads(json.dumps(it.state_dict()))
    assert state["root"]["index"] == N + 6_000  # (the input of the last element taken)
    with iter(ds) as restored:
        restored.load_state_dict(state)
        assert ints(restored) == list(range(6_001, N))


@pytest.mark.slow
def test_ten_thousand_concatenations_of_empty_and_mapped_datasets(default_recursion_limit):
    empty = fl.Dataset.range(0)
    ds = fl.Dataset.range(3)
    for i in range(N):
        ds = ds.concatenate(empty if i % 2 else fl.Dataset.range(i, i + 1).map(lambda x: -x))
    ds = ds.concatenate(fl.Dataset.range(7, 9))
    expected = [0, 1, 2] + [-i for i in range(0, N, 2)] + [7, 8]
    assert ds.cardinality() == len(expected)
    assert ints(ds) == expected
    # Restored at the end of an input that thousands of empty ones follow.
    with iter(ds) as it:
        assert ints(next(it) for _ in range(4_000)) == expected[:4_000]
        state = it.state_dict()
    with iter(ds) as restored:
        restored.load_state_dict(state)
        assert ints(restored) == expected[4_000:]


def test_checkpoints_everywhere_in_a_chain_longer_than_400():
    ds = fl.Dataset.range(2)
    for i in range(500):
        ds = ds.concatenate(fl.Dataset.range(0) if i % 3 else fl.Dataset.range(i, i + 2))
    expected = [0, 1] + [x for i in range(0, 500, 3) for x in (i, i + 1)]
    assert ints(ds) == expected
    check_checkpointing(ds, steps=[0, 2, 3, 100, len(expected) - 1, len(expected)])


def test_names_and_nested_specs_when_merged():
    a = fl.Dataset.from_tensors(np.zeros((2, 3)))
    b = fl.Dataset.from_tensors(np.zeros((4, 3)))
    named = a.concatenate(b, name="files")
    merged = named.concatenate(a)
    assert merged._inputs == (a, b, a) and merged.name == "files"
    assert merged.concatenate(b, name="other").name == "other"
    assert merged.element_spec == fl.TensorSpec((None, 3), np.dtype(np.float64))
    # Concatenations given as the second dataset are merged too, in order.
    ds = fl.Dataset.range(2).concatenate(fl.Dataset.range(5, 7).concatenate(fl.Dataset.range(9, 10)))
    assert len(ds._inputs) == 3 and ints(ds) == [0, 1, 5, 6, 9]
    # tf.data: (int32, int32) and (int32, float32) do not concatenate.
    with pytest.raises(fl.StructureError, match=r"leaf \[1\] has dtype int32.*float32"):
        fl.Dataset.from_tensors((1, 2)).concatenate(fl.Dataset.from_tensors((1, 2))).concatenate(
            fl.Dataset.from_tensors((1, 2.0)))


def test_graph_rewrites_of_the_inputs():
    from feedline.optimize import optimize

    ds = fl.Dataset.range(2).map(plus_one).map(twice).concatenate(fl.Dataset.range(3))
    ds = ds.concatenate(fl.Dataset.range(1).map(plus_one).map(twice))
    rewritten = optimize(ds, fl.Options())
    while type(rewritten).__name__ == "PrefetchDataset":  # (when prefetch injection is on)
        rewritten = rewritten._inputs[0]
    assert type(rewritten).__name__ == "ConcatenateDataset"
    # plus_one and twice are elementwise: the fused chains over a range are vectorized.
    assert [type(node).__name__ for node in rewritten._inputs] == [
        "VectorizedRangeDataset", "RangeDataset", "VectorizedRangeDataset"]
    assert rewritten.element_spec == ds.element_spec == fl.TensorSpec((), np.dtype(np.int64))
    assert ints(ds) == [2, 4, 0, 1, 2, 2]


def test_checkpointing_restores_failing_elements_in_place():
    ds = fail_at(fl.Dataset.range(4), [0, 3]).concatenate(fail_at(fl.Dataset.range(10, 13), [1]))
    check_checkpointing(ds, epochs=3)
