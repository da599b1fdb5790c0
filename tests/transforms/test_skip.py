import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.testing import check_checkpointing, fail_at


def ints(ds):
    return [int(x) for x in ds]


@pytest.mark.parametrize("count, expected", [(2, [2, 3, 4]), (0, [0, 1, 2, 3, 4]), (-1, []),
                                             (5, []), (9, [])])
def test_skip_values(count, expected):
    assert ints(fl.Dataset.range(5).skip(count)) == expected


def test_skip_of_empty_dataset():
    assert ints(fl.Dataset.range(0).skip(2)) == []
    assert ints(fl.Dataset.range(0).skip(-1)) == []


def test_skip_cardinality_follows_tf_data():
    assert fl.Dataset.range(5).skip(2).cardinality() == 3
    assert fl.Dataset.range(5).skip(7).cardinality() == 0
    assert fl.Dataset.range(5).skip(-1).cardinality() == 0
    assert fl.Dataset.range(5).repeat().skip(3).cardinality() == fl.INFINITE
    assert fl.Dataset.range(5).filter(lambda x: True).skip(1).cardinality() == fl.UNKNOWN


@pytest.mark.parametrize("count", [2.0, None, True, "1"])
def test_skip_rejects_bad_count(count):
    with pytest.raises(TypeError, match=r"skip\(count\)"):
        fl.Dataset.range(3).skip(count)


@pytest.mark.parametrize("count", [-1, -2, -5, np.int64(-2)])
def test_skip_any_negative_count_skips_everything(count):
    # tf.data's SkipDataset tests count < 0: every negative count skips the whole input.
    ds = fl.Dataset.range(3).skip(count)
    assert list(ds) == [] and ds.cardinality() == 0 and ds.count == -1
    assert fl.Dataset.range(3).repeat().skip(count).cardinality() == fl.INFINITE


def test_skip_reports_failures_and_continues():
    def fail_on_1(x):
        if x == 1:
            raise KeyError("bad")
        return x

    it = fl.Dataset.range(5).map(fail_on_1).skip(2)._make_iterator(IteratorContext())
    with pytest.raises(KeyError):
        next(it)
    # the failed element is not counted: two good elements (0, 2) are skipped
    assert ints(it) == [3, 4]


def test_skip_then_take():
    assert ints(fl.Dataset.range(10).skip(3).take(2)) == [3, 4]


@pytest.mark.parametrize("count", [0, 2, -1, 8])
def test_skip_checkpointing(count):
    check_checkpointing(fl.Dataset.range(6).skip(count))


@pytest.mark.parametrize("count", [0, 2, -1])
def test_checkpointing_restores_failing_elements_in_place(count):
    # a failure among the skipped elements is raised, not counted (as tf.data)
    check_checkpointing(fail_at(fl.Dataset.range(8), [1, 5]).skip(count), constant_state_size=True)
