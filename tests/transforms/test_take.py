import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing, fail_at


def ints(ds):
    return [int(x) for x in ds]


@pytest.mark.parametrize("count, expected", [(3, [0, 1, 2]), (0, []), (-1, [0, 1, 2, 3, 4]),
                                             (10, [0, 1, 2, 3, 4])])
def test_take_values(count, expected):
    assert ints(fl.Dataset.range(5).take(count)) == expected


def test_take_of_empty_dataset():
    assert ints(fl.Dataset.range(0).take(3)) == []


def test_take_from_infinite_input_stops_pulling():
    pulled = []

    def record(x):
        pulled.append(int(x))
        return x

    ds = fl.Dataset.range(100).map(record).take(2)
    assert ints(ds) == [0, 1]
    assert pulled == [0, 1]
    assert ints(fl.Dataset.range(3).repeat().take(5)) == [0, 1, 2, 0, 1]


def test_take_cardinality_follows_tf_data():
    assert fl.Dataset.range(5).take(3).cardinality() == 3
    assert fl.Dataset.range(5).take(10).cardinality() == 5
    assert fl.Dataset.range(5).take(-1).cardinality() == 5
    assert fl.Dataset.range(5).take(0).cardinality() == 0
    assert fl.Dataset.range(5).repeat().take(7).cardinality() == 7
    assert fl.Dataset.range(5).repeat().take(-1).cardinality() == fl.INFINITE
    assert fl.Dataset.range(5).filter(lambda x: True).take(3).cardinality() == fl.UNKNOWN


def test_take_keeps_element_spec():
    assert fl.Dataset.range(5).take(2).element_spec == fl.Dataset.range(5).element_spec


@pytest.mark.parametrize("count", [1.5, True, "3", np.float64(2)])
def test_take_rejects_bad_count(count):
    with pytest.raises(TypeError, match=r"take\(count\)"):
        fl.Dataset.range(3).take(count)


@pytest.mark.parametrize("count", [-1, -2, -7, np.array(-2)])
def test_take_any_negative_count_takes_everything(count):
    # tf.data's TakeDataset tests count < 0: every negative count takes the whole input.
    ds = fl.Dataset.range(3).take(count)
    assert [int(x) for x in ds] == [0, 1, 2] and ds.cardinality() == 3 and ds.count == -1
    assert fl.Dataset.range(3).repeat().take(count).cardinality() == fl.INFINITE


def test_take_does_not_count_failed_elements():
    def fail_on_1(x):
        if x == 1:
            raise ValueError("bad")
        return x

    ds = fl.Dataset.range(5).map(fail_on_1).take(2)
    it = ds._make_iterator(fl.core.iterator.IteratorContext())
    assert int(next(it)) == 0
    with pytest.raises(ValueError):
        next(it)
    assert int(next(it)) == 2
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize("count", [0, 3, -1, 9])
def test_take_checkpointing(count):
    check_checkpointing(fl.Dataset.range(6).take(count))


def test_take_of_infinite_checkpointing():
    check_checkpointing(fl.Dataset.range(3).repeat().take(7))


@pytest.mark.parametrize("count", [0, 3, -1])
def test_checkpointing_restores_failing_elements_in_place(count):
    check_checkpointing(fail_at(fl.Dataset.range(8), [1, 5]).take(count), constant_state_size=True)
