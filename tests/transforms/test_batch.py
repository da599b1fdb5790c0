import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing


def lists(ds):
    return [b.tolist() for b in ds]


def test_batch_with_and_without_remainder():
    assert lists(fl.Dataset.range(7).batch(3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert lists(fl.Dataset.range(7).batch(3, drop_remainder=True)) == [[0, 1, 2], [3, 4, 5]]
    assert lists(fl.Dataset.range(2).batch(3, drop_remainder=True)) == []
    assert lists(fl.Dataset.range(0).batch(3)) == []


def test_batch_cardinality_and_spec():
    assert fl.Dataset.range(7).batch(3).cardinality() == 3
    assert fl.Dataset.range(7).batch(3, drop_remainder=True).cardinality() == 2
    assert fl.Dataset.range(7).repeat().batch(3).cardinality() == fl.INFINITE
    spec = fl.Dataset.range(7).batch(3, drop_remainder=True).element_spec
    assert spec == fl.TensorSpec((3,), np.dtype(np.int64))


def test_batch_nested_and_bytes():
    ds = fl.Dataset.from_tensor_slices({"x": np.arange(6).reshape(3, 2), "s": [b"a", b"b", b"c"]})
    first, second = list(ds.batch(2))
    assert first["x"].tolist() == [[0, 1], [2, 3]] and first["x"].dtype == np.int64
    assert first["s"].dtype == object and first["s"].tolist() == [b"a", b"b"]
    assert second["s"].tolist() == [b"c"]


def test_batch_shape_mismatch_names_element_and_leaf():
    ds = fl.Dataset.range(1, 4).map(lambda x: {"v": np.zeros(int(x))}).batch(3)
    with pytest.raises(fl.StructureError,
                       match=r"leaf \['v'\] of batch element 1 has shape \(2,\), but element 0 has"
                             r" shape \(1,\); use padded_batch"):
        list(ds)


def test_batch_structure_mismatch_is_clear():
    ds = fl.Dataset.range(2).map(lambda x: (x,) if x == 0 else (x, x)).batch(2)
    with pytest.raises(fl.StructureError, match="element 1 is"):
        list(ds)


def test_batch_of_single_leaves_names_the_element_that_is_a_structure():
    from feedline.transforms.batch import stack_elements

    with pytest.raises(fl.StructureError,
                       match=r"cannot batch: element 2 is .*, element 0 is a single leaf"):
        stack_elements([b"a", b"b", (b"c", b"d"), b"e"])
    assert stack_elements([b"a", b"b"]).tolist() == [b"a", b"b"]


@pytest.mark.parametrize("size, error", [(0, ValueError), (-1, ValueError), (1.5, TypeError),
                                         (True, TypeError)])
def test_invalid_batch_size(size, error):
    with pytest.raises(error, match=r"batch\(batch_size\)"):
        fl.Dataset.range(3).batch(size)


@pytest.mark.parametrize("parallel", [2, fl.AUTOTUNE])
def test_parallel_batch_matches_sequential(parallel):
    ds = fl.Dataset.range(50).map(lambda x: (x, np.full(3, x)))
    expected = list(ds.batch(4))
    got = list(ds.batch(4, num_parallel_calls=parallel))
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()


@pytest.mark.parametrize("parallel", [None, 2])
def test_batch_checkpointing(parallel):
    check_checkpointing(fl.Dataset.range(11).batch(3, num_parallel_calls=parallel))
    check_checkpointing(fl.Dataset.range(11).batch(3, drop_remainder=True,
                                                   num_parallel_calls=parallel))
