import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing


def summing():
    return fl.Reducer(init_func=lambda _: np.int64(0), reduce_func=lambda x, y: x + y,
                      finalize_func=lambda x: x)


@pytest.mark.parametrize("i", range(1, 11))
def test_sum_per_key_in_the_order_keys_appear(i):
    # TF's testSum: values [(i - 1) * i, i * i].
    ds = fl.Dataset.range(2 * i).group_by_reducer(lambda x: x % 2, summing())
    assert [int(x) for x in ds] == [(i - 1) * i, i * i]


def test_tuple_states_are_finalized_as_arguments_and_elements_reduced_whole():
    # TF's testTuple and testConcat.
    reducer = fl.Reducer(lambda _: (np.array([], np.int64), np.int64(0)),
                         lambda s, v: (np.concatenate([s[0], [v[0]]]), s[1] + v[1]),
                         lambda s1, s2: (s1, s2))
    pairs = fl.Dataset.zip((fl.Dataset.range(10), fl.Dataset.range(10)))
    [(first, total)] = list(pairs.group_by_reducer(lambda x, y: np.int64(0), reducer))
    assert first.tolist() == list(range(10)) and int(total) == 45
    chars = fl.Dataset.from_tensor_slices([c.encode() for c in "abcdefghij"])
    concat = fl.Reducer(lambda _: b"", lambda x, y: x + y[0], lambda x: x)
    out = fl.Dataset.zip((chars, fl.Dataset.range(10))).group_by_reducer(
        lambda x, y: y % 2, concat)
    assert list(out) == [b"acegi", b"bdfhj"]


def test_a_state_changing_dtype_is_tf_datas_type_error():
    reducer = fl.Reducer(lambda _: np.int32(1), lambda x, y: np.int64(1), lambda x: x)
    ds = fl.Dataset.range(10).group_by_reducer(lambda _: np.int64(0), reducer, name="g")
    with pytest.raises(TypeError, match="g: The element types for the new state must match "
                                        "the initial state"):
        list(ds)


def test_keys_must_be_int64_scalars():
    for key, error in ((lambda _: np.array([0, 0]), ValueError),
                       (lambda _: np.int32(0), ValueError), (lambda _: "wrong", TypeError)):
        with pytest.raises(error, match="key_func"):
            list(fl.Dataset.range(10).group_by_reducer(key, summing()))


def test_reducer_arguments_are_checked():
    with pytest.raises(TypeError, match="needs a callable finalize_func"):
        fl.Reducer(lambda k: 0, lambda s, x: s, None)
    with pytest.raises(TypeError, match="needs a feedline Reducer"):
        fl.Dataset.range(3).group_by_reducer(lambda x: x, lambda s, x: s)


def test_cardinality_and_checkpointing():
    ds = fl.Dataset.range(40).group_by_reducer(lambda x: x % 7, summing())
    assert ds.cardinality() == fl.UNKNOWN
    assert [int(x) for x in check_checkpointing(ds)] == [
        sum(range(k, 40, 7)) for k in range(7)]
    assert fl.Dataset.range(3).repeat().group_by_reducer(
        lambda x: x, summing()).cardinality() == fl.INFINITE
