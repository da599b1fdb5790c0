import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing, fail_at


def ints(ds):
    return [int(x) for x in ds]


def test_take_while_values():
    assert ints(fl.Dataset.range(10).take_while(lambda x: x < 4)) == [0, 1, 2, 3]
    assert ints(fl.Dataset.range(10).take_while(lambda x: x > 4)) == []
    assert ints(fl.Dataset.range(3).take_while(lambda x: True)) == [0, 1, 2]
    assert ints(fl.Dataset.range(0).take_while(lambda x: True)) == []


def test_take_while_stops_at_first_false_even_if_later_true():
    ds = fl.Dataset.from_tensor_slices([1, 2, 7, 1, 2]).take_while(lambda x: x < 5)
    assert ints(ds) == [1, 2]


def test_take_while_does_not_read_past_the_stop():
    pulled = []

    def record(x):
        pulled.append(int(x))
        return x

    assert ints(fl.Dataset.range(100).map(record).take_while(lambda x: x < 2)) == [0, 1]
    assert pulled == [0, 1, 2]


def test_take_while_unpacks_tuples_and_accepts_numpy_bools():
    ds = fl.Dataset.from_tensor_slices(([1, 2, 3], [3, 2, 1])).take_while(
        lambda a, b: np.less(a, b))
    assert [(int(a), int(b)) for a, b in ds] == [(1, 3)]


def test_take_while_rejects_non_bool_predicate_results():
    with pytest.raises(TypeError, match="scalar bool"):
        list(fl.Dataset.range(3).take_while(lambda x: x))
    with pytest.raises(TypeError, match="scalar bool"):
        list(fl.Dataset.range(3).take_while(lambda x: np.array([True, False])))
    with pytest.raises(TypeError, match="callable"):
        fl.Dataset.range(3).take_while(True)


def test_take_while_error_names_stage_and_index():
    def pred(x):
        if x == 2:
            raise ZeroDivisionError
        return True

    with pytest.raises(ZeroDivisionError) as info:
        list(fl.Dataset.range(5).take_while(pred, name="tw"))
    assert "feedline: raised in tw at input element 2" in info.value.__notes__


def test_take_while_cardinality_and_spec():
    ds = fl.Dataset.range(5).take_while(lambda x: x < 2)
    assert ds.cardinality() == fl.UNKNOWN
    assert ds.element_spec == fl.Dataset.range(5).element_spec


def test_take_while_checkpointing():
    check_checkpointing(fl.Dataset.range(8).take_while(lambda x: x < 5))
    check_checkpointing(fl.Dataset.range(4).take_while(lambda x: x < 10))


def test_checkpointing_restores_failing_elements_in_place():
    ds = fail_at(fl.Dataset.range(10), [1, 3]).take_while(lambda x: x < 6)
    check_checkpointing(ds, constant_state_size=True)
