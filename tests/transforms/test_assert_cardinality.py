import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing


def test_reports_the_asserted_cardinality_and_passes_elements_through():
    ds = fl.Dataset.range(10).filter(lambda x: True)
    assert ds.cardinality() == fl.UNKNOWN
    checked = ds.assert_cardinality(10)
    assert checked.cardinality() == 10
    assert [int(x) for x in checked] == list(range(10))
    assert len(checked) == 10


# TF's testIncorrectCardinality, with the messages it asserts.
@pytest.mark.parametrize("num_elements, asserted, message", [
    (10, 20, "Input dataset was expected to contain 20 elements but contained only 10 "
             "elements."),
    (1, 20, "Input dataset was expected to contain 20 elements but contained only 1 element."),
    (10, fl.INFINITE, "Input dataset was expected to contain an infinite number of elements "
                      "but contained only 10 elements."),
    (1, fl.INFINITE, "Input dataset was expected to contain an infinite number of elements "
                     "but contained only 1 element."),
    (10, 5, "Input dataset was expected to contain 5 elements but contained at least 6 "
            "elements."),
    (10, 1, "Input dataset was expected to contain 1 element but contained at least 2 "
            "elements."),
])
def test_a_wrong_cardinality_is_tf_datas_error(num_elements, asserted, message):
    ds = fl.Dataset.range(num_elements).assert_cardinality(asserted)
    got = []
    with pytest.raises(fl.InvalidArgumentError, match="^assert_cardinality: " + message):
        for x in ds:
            got.append(int(x))
    assert got == list(range(min(num_elements, asserted if asserted > 0 else num_elements)))


def test_checkpointing():
    assert [int(x) for x in check_checkpointing(
        fl.Dataset.range(200).assert_cardinality(200))] == list(range(200))


def test_the_count_is_checked_after_a_restore():
    ds = fl.Dataset.range(6).assert_cardinality(4)
    it = iter(ds)
    [next(it) for _ in range(3)]
    state = it.state_dict()
    again = iter(ds)
    again.load_state_dict(state)
    assert int(next(again)) == 3
    with pytest.raises(fl.InvalidArgumentError, match="at least 5 elements"):
        next(again)


def test_the_cardinality_must_be_an_int():
    with pytest.raises(TypeError, match="expected_cardinality"):
        fl.Dataset.range(3).assert_cardinality(np.float64(3.0))
