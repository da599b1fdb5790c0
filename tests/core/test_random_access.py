"""Random access: ``len(ds)`` and ``ds[i]`` agree with iteration, element for element."""

import collections

import numpy as np
import pytest

import feedline as fl
from feedline.core.random_access import (
    at,
    open_reader,
    random_access_blocker,
    supports_random_access,
)
from feedline.testing.elements import assert_elements_equal

Point = collections.namedtuple("Point", "x y")

RANDOM_ACCESS_PIPELINES = {
    "range": lambda: fl.Dataset.range(3, 40, 4),
    "range_negative_step": lambda: fl.Dataset.range(10, -3, -2),
    "slices_tuple": lambda: fl.Dataset.from_tensor_slices((np.arange(7), [b"a"] * 7)),
    "slices_dict": lambda: fl.Dataset.from_tensor_slices({"a": np.arange(6) * 1.5,
                                                          "b": np.ones((6, 2))}),
    "map_unpacks_tuples": lambda: fl.Dataset.from_tensor_slices(
        (np.arange(5), np.arange(5) * 10)).map(lambda a, b: a + b),
    "map_namedtuple": lambda: fl.Dataset.range(5).map(lambda x: Point(x, -x)),
    "parallel_map": lambda: fl.Dataset.range(9).map(lambda x: x * x, num_parallel_calls=3),
    "batch": lambda: fl.Dataset.range(10).map(lambda x: (x, x * 2)).batch(3),
    "batch_drop": lambda: fl.Dataset.range(10).batch(3, drop_remainder=True),
    "take_skip": lambda: fl.Dataset.range(20).skip(3).take(9),
    "skip_all": lambda: fl.Dataset.range(5).skip(-1),
    "take_all": lambda: fl.Dataset.range(5).take(-1),
    "shard": lambda: fl.Dataset.range(17).shard(4, 3),
    "prefetch_options": lambda: fl.Dataset.range(6).prefetch(2).with_options(fl.Options(seed=1)),
    "global_shuffle": lambda: fl.Dataset.range(12).global_shuffle(seed=3).map(lambda x: x + 1),
    "repeat": lambda: fl.Dataset.range(5).map(lambda x: x * 3).repeat(3),
    "repeat_repeat": lambda: fl.Dataset.range(3).repeat(2).repeat(2).batch(5),
    "repeat_zero": lambda: fl.Dataset.range(4).repeat(0),
    "repeat_forever_empty": lambda: fl.Dataset.range(0).repeat(),
    "global_shuffle_of_repeat": lambda: fl.Dataset.range(7).repeat(3).global_shuffle(seed=2),
    "unbatch": lambda: fl.Dataset.range(10).batch(4, drop_remainder=True).unbatch(),
    "unbatch_slices_dict": lambda: fl.Dataset.from_tensor_slices(
        {"a": np.arange(12).reshape(4, 3), "b": np.ones((4, 3, 2))}).unbatch().take(10),
}


@pytest.mark.parametrize("name", sorted(RANDOM_ACCESS_PIPELINES))
def test_indexing_agrees_with_iteration(name):
    ds = RANDOM_ACCESS_PIPELINES[name]()
    expected = list(ds)
    assert supports_random_access(ds)
    assert len(ds) == len(expected)
    assert_elements_equal([ds[i] for i in range(len(ds))], expected, name)
    assert_elements_equal([ds[i - len(ds)] for i in range(len(ds))], expected, name)
    with open_reader(ds) as reader:
        order = list(reversed(range(len(reader))))
        assert_elements_equal(reader.get_many(order), expected[::-1], name)


def test_indexing_errors():
    ds = fl.Dataset.range(4)
    with pytest.raises(IndexError, match="dataset index 4 out of range for 4 elements"):
        ds[4]
    with pytest.raises(IndexError, match="dataset index -5 out of range"):
        ds[-5]
    for bad in (1.0, "1", slice(0, 2), True):
        with pytest.raises(TypeError, match="dataset indices must be integers"):
            ds[bad]
    assert int(ds[np.int32(2)]) == 2


@pytest.mark.parametrize("make, stage", [
    (lambda: fl.Dataset.range(5).filter(lambda x: x > 1).map(abs), "filter"),
    (lambda: fl.Dataset.range(5).shuffle(3).batch(2), "shuffle"),
    (lambda: fl.Dataset.range(5).repeat(), "repeat"),
    (lambda: fl.Dataset.range(5).global_shuffle(seed=1).repeat(2), "repeat"),
    (lambda: fl.Dataset.range(5).batch(2).unbatch(), "unbatch"),
    (lambda: fl.Dataset.range(5).interleave(lambda x: fl.Dataset.range(x)), "interleave"),
])
def test_a_stage_without_random_access_is_named(make, stage):
    ds = make()
    assert not supports_random_access(ds)
    assert stage in random_access_blocker(ds).name
    with pytest.raises(TypeError, match=rf"ds\[i\] needs random access .* stage '{stage}"):
        ds[0]


def test_at_is_tf_data_at_and_indexing_is_python_indexing():
    # tf.data.experimental.at: any index outside [0, len) is OutOfRange, -1 included;
    # ds[i] counts a negative index from the end, as a Python sequence.
    ds = fl.Dataset.range(10, 13)
    assert int(at(ds, 0)) == 10 and int(at(ds, 2)) == 12 and int(at(ds, np.int64(1))) == 11
    assert int(ds[-1]) == 12
    for index in (-1, -3, 3, 100):
        with pytest.raises(fl.OutOfRangeError, match=rf"index {index} is out of range \[0, 3\)"):
            at(ds, index)
    with pytest.raises(IndexError):  # OutOfRangeError is an IndexError
        at(ds, -1)
    with pytest.raises(fl.OutOfRangeError):
        at(fl.Dataset.range(0), 0)
    for bad in (1.0, "1", slice(0, 2), True):
        with pytest.raises(TypeError, match="dataset indices must be integers"):
            at(ds, bad)
    with pytest.raises(TypeError, match=r"at\(\) needs random access .* stage 'filter"):
        at(ds.filter(lambda x: x > 10), 0)


def test_function_errors_name_the_stage_and_index():
    ds = fl.Dataset.range(5).map(lambda x: 1 // (int(x) - 3), name="inverse")
    assert int(ds[2]) == -1
    with pytest.raises(ZeroDivisionError) as raised:
        ds[3]
    assert "feedline: raised in inverse at input element 3" in raised.value.__notes__


def test_map_random_access_runs_the_function_per_index_only():
    calls = []
    ds = fl.Dataset.range(1000).map(lambda x: calls.append(int(x)) or x)
    assert int(ds[777]) == 777
    assert calls == [777]


def test_len_of_unknown_cardinality_needs_random_access():
    with pytest.raises(TypeError, match="the dataset's length is unknown"):
        len(fl.Dataset.range(5).filter(lambda x: True))
    with pytest.raises(TypeError, match="infinite"):
        len(fl.Dataset.range(5).repeat())
