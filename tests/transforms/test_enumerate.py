import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.testing import Failed, check_checkpointing, fail_at


def test_enumerate_values_and_types():
    out = list(fl.Dataset.from_tensor_slices([7, 8, 9]).enumerate())
    assert [(int(i), int(x)) for i, x in out] == [(0, 7), (1, 8), (2, 9)]
    assert all(type(i) is np.int64 for i, _ in out)


def test_enumerate_start_and_nested_elements():
    ds = fl.Dataset.from_tensor_slices({"a": [1, 2]}).enumerate(start=5)
    out = list(ds)
    assert [int(i) for i, _ in out] == [5, 6]
    assert [int(d["a"]) for _, d in out] == [1, 2]


def test_enumerate_negative_start():
    assert [int(i) for i, _ in fl.Dataset.range(3).enumerate(-1)] == [-1, 0, 1]


def test_enumerate_of_empty():
    assert list(fl.Dataset.range(0).enumerate()) == []


def test_enumerate_cardinality_and_spec():
    ds = fl.Dataset.range(4).enumerate()
    assert ds.cardinality() == 4
    assert ds.element_spec == (fl.TensorSpec((), np.dtype(np.int64)),
                               fl.TensorSpec((), np.dtype(np.int64)))
    with pytest.raises(TypeError):
        fl.Dataset.range(4).enumerate(1.5)


def test_failed_element_uses_up_its_index():
    def fail_on_1(x):
        if x == 1:
            raise ValueError("bad")
        return x

    it = fl.Dataset.range(3).map(fail_on_1).enumerate()._make_iterator(IteratorContext())
    assert [int(v) for v in next(it)] == [0, 0]
    with pytest.raises(ValueError):
        next(it)
    assert [int(v) for v in next(it)] == [2, 2]


def test_enumerate_checkpointing():
    check_checkpointing(fl.Dataset.range(6).enumerate(10))


def test_checkpointing_restores_failing_elements_in_place():
    ds = fail_at(fl.Dataset.range(7), [0, 3]).enumerate(10)
    assert check_checkpointing(ds, constant_state_size=True)[3] == Failed("InjectedError")
