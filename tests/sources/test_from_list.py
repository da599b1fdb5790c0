import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing


def test_items_in_order_with_a_common_spec():
    ds = fl.Dataset.from_list([np.array([[1]], np.int32), np.array([[2, 3]], np.int32)])
    assert ds.element_spec == fl.TensorSpec((1, None), np.dtype(np.int32))
    assert [x.tolist() for x in ds] == [[[1]], [[2, 3]]]
    assert ds.cardinality() == 2


def test_tuples_dicts_and_strings():
    ds = fl.Dataset.from_list([{"foo": [1, 2], "name": "a"}, {"foo": [4, 5], "name": "bc"}])
    assert [(e["foo"].tolist(), e["name"]) for e in ds] == [([1, 2], b"a"), ([4, 5], b"bc")]
    pairs = fl.Dataset.from_list([(np.int32(1), np.int32(2)), (np.int32(3), np.int32(4))])
    assert [(int(a), int(b)) for a, b in pairs] == [(1, 2), (3, 4)]


def test_invalid_inputs_are_tf_datas_value_errors():
    with pytest.raises(ValueError, match="`elements` should not be empty"):
        fl.Dataset.from_list([])
    with pytest.raises(ValueError, match="`elements` must be a list, got tuple"):
        fl.Dataset.from_list((1, 2, 3))
    with pytest.raises(fl.StructureError, match="element 1 .* same structure"):
        fl.Dataset.from_list([np.int32(1), (np.int32(1), np.int32(2))])
    with pytest.raises(fl.StructureError, match="element 1 does not match .*dtype"):
        fl.Dataset.from_list([np.int32(1), np.float32(2.5)])


def test_random_access_and_tf_datas_out_of_range():
    from feedline.core.random_access import at

    ds = fl.Dataset.from_list([np.array([1, 2]), np.array([3, 4]), np.array([5, 6])])
    assert at(ds, 1).tolist() == [3, 4] and ds[-1].tolist() == [5, 6]
    for index in (-1, 3):
        with pytest.raises(fl.OutOfRangeError):
            at(ds, index)


def test_elements_are_copies():
    ds = fl.Dataset.from_list([np.zeros(2)])
    first = next(iter(ds))
    first += 1
    assert next(iter(ds)).tolist() == [0.0, 0.0]


def test_checkpointing():
    check_checkpointing(fl.Dataset.from_list([{"foo": np.int32(k), "bar": np.float32(k / 2)}
                                              for k in range(7)]))
    check_checkpointing(fl.Dataset.from_list(list(range(25))).shuffle(5, seed=1))
