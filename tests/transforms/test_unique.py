import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.testing import check_checkpointing, fail_at


def test_unique_ints_keep_first_occurrence_order():
    ds = fl.Dataset.from_tensor_slices([1, 37, 2, 37, 2, 1]).unique()
    assert [int(x) for x in ds] == [1, 37, 2]


def test_unique_bytes_and_str():
    ds = fl.Dataset.from_tensor_slices([b"b", b"a", b"b", b"c", b"a"]).unique()
    assert list(ds) == [b"b", b"a", b"c"]
    ds = fl.Dataset.range(3).map(lambda x: "xy"[int(x) % 2]).unique()
    assert list(ds) == [b"x", b"y"]


def test_unique_keeps_dtype_and_spec():
    ds = fl.Dataset.from_tensor_slices(np.array([3, 3, 4], np.int32)).unique()
    out = list(ds)
    assert [type(x) for x in out] == [np.int32, np.int32]
    assert ds.element_spec == fl.TensorSpec((), np.dtype(np.int32))
    assert ds.cardinality() == fl.UNKNOWN


def test_unique_of_empty():
    assert list(fl.Dataset.range(0).unique()) == []


@pytest.mark.parametrize("data", [[1.5, 2.5], [[1.0, 2.0], [3.0, 4.0]], [True, False]])
def test_unsupported_elements_rejected_at_construction(data):
    with pytest.raises(TypeError, match="integer or bytes elements"):
        fl.Dataset.from_tensor_slices(np.array(data)).unique()


def test_unsupported_structures_rejected():
    with pytest.raises(TypeError, match=r"but the elements are \(TensorSpec"):
        fl.Dataset.from_tensor_slices(([1], [2])).unique()
    ds = fl.Dataset.range(3).map(lambda x: np.array([x, x], dtype=float)).unique()
    with pytest.raises(TypeError, match="input element 0 is an array of shape"):
        list(ds)
    with pytest.raises(TypeError, match=r"input element 0 is \(leaf, leaf\)"):
        list(fl.Dataset.range(3).map(lambda x: (x, x)).unique())


def test_unique_continues_after_an_upstream_failure():
    def fail_on_1(x):
        if x == 1:
            raise ValueError("bad")
        return x % 2

    it = fl.Dataset.range(5).map(fail_on_1).unique()._make_iterator(IteratorContext())
    assert int(next(it)) == 0
    with pytest.raises(ValueError):
        next(it)
    assert [int(x) for x in it] == [1]


def test_unique_checkpointing():
    check_checkpointing(fl.Dataset.from_tensor_slices([3, 1, 3, 2, 1, 4, 2]).unique())
    check_checkpointing(fl.Dataset.from_tensor_slices([b"x", b"y", b"x", b""]).unique())


def test_unique_on_vector_elements_compares_shape_and_contents():
    # tf.data's unique hashes whole tensors: vectors work, equal contents of another shape
    # are another value.
    rows = [[1, 2], [3, 4], [1, 2], [2, 1], [3, 4]]
    ds = fl.Dataset.from_tensor_slices(np.array(rows)).unique()
    assert [r.tolist() for r in ds] == [[1, 2], [3, 4], [2, 1]]
    check_checkpointing(ds)
    shapes = fl.Dataset.range(4).map(lambda x: np.ones(int(x) % 2 + 1, dtype=np.int64)
                                      .reshape((1, -1) if x < 2 else (-1,))).unique()
    assert [a.shape for a in shapes] == [(1, 1), (1, 2), (1,), (2,)]
    words = fl.Dataset.from_tensor_slices([[b"a", b"b"], [b"a", b"b"], [b"b", b"a"]]).unique()
    assert [w.tolist() for w in words] == [[b"a", b"b"], [b"b", b"a"]]
    check_checkpointing(words)


def test_checkpointing_restores_failing_elements_in_place():
    ds = fail_at(fl.Dataset.from_tensor_slices([3, 1, 3, 2, 1, 4]), [0, 3]).unique()
    check_checkpointing(ds)
