import json

import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.testing import check_checkpointing, fail_at
from feedline.transforms.window import ElementListDataset, RestoredElementError


def windows(ds):
    return [[int(x) for x in w] for w in ds]


# The examples of tf.data.Dataset.window's documentation.
@pytest.mark.parametrize("args, kwargs, expected", [
    ((3,), {}, [[0, 1, 2], [3, 4, 5], [6]]),
    ((3,), {"drop_remainder": True}, [[0, 1, 2], [3, 4, 5]]),
    ((3,), {"shift": 2}, [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6]]),
    ((3,), {"shift": 1, "drop_remainder": True},
     [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 6]]),
    ((3,), {"shift": 1, "stride": 2, "drop_remainder": True}, [[0, 2, 4], [1, 3, 5], [2, 4, 6]]),
])
def test_tf_data_documented_examples(args, kwargs, expected):
    ds = fl.Dataset.range(7).window(*args, **kwargs)
    assert windows(ds) == expected
    assert ds.cardinality() == len(expected)


@pytest.mark.parametrize("size, shift, stride, drop", [
    (3, 1, 2, False), (2, 5, 1, False), (2, 5, 1, True), (4, 3, 2, False), (4, 3, 2, True),
    (1, 1, 1, False), (5, 2, 3, False), (3, 4, 1, True), (10, 1, 1, False), (10, 1, 1, True),
])
def test_window_matches_definition_and_cardinality(size, shift, stride, drop):
    n = 11
    expected = []
    for start in range(0, n, shift):
        w = [start + j * stride for j in range(size) if start + j * stride < n]
        if drop and start + (size - 1) * stride >= n:
            break
        expected.append(w)
    ds = fl.Dataset.range(n).window(size, shift, stride, drop)
    assert windows(ds) == expected
    assert ds.cardinality() == len(expected)


def test_shift_beyond_window_discards_input_eagerly():
    pulled = []

    def record(x):
        pulled.append(int(x))
        return x

    it = iter(fl.Dataset.range(10).map(record).window(2, 5))
    assert [int(x) for x in next(it)] == [0, 1]
    assert pulled == [0, 1, 2, 3, 4]
    it.close()


def test_nested_elements_give_nested_windows():
    ds = fl.Dataset.from_tensor_slices(([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])).window(2)
    out = [([int(x) for x in a], [int(y) for y in b]) for a, b in ds]
    assert out == [([1, 2], [6, 7]), ([3, 4], [8, 9]), ([5], [10])]
    ds = fl.Dataset.from_tensor_slices({"a": [1, 2, 3], "b": [b"x", b"y", b"z"]}).window(2)
    out = [{k: list(v) for k, v in w.items()} for w in ds]
    assert out == [{"a": [1, 2], "b": [b"x", b"y"]}, {"a": [3], "b": [b"z"]}]


def test_window_then_flat_map_batch():
    ds = fl.Dataset.range(7).window(3, 2).flat_map(lambda w: w.batch(3))
    assert [b.tolist() for b in ds] == [[0, 1, 2], [2, 3, 4], [4, 5, 6], [6]]
    pairs = fl.Dataset.from_tensor_slices(([1, 2, 3], [4, 5, 6])).window(2).flat_map(
        lambda x, y: fl.Dataset.zip((x.batch(2), y.batch(2))))
    assert [(a.tolist(), b.tolist()) for a, b in pairs] == [([1, 2], [4, 5]), ([3], [6])]


def test_window_datasets_know_their_size_and_spec():
    w = next(iter(fl.Dataset.range(5).window(3)))
    assert isinstance(w, ElementListDataset)
    assert w.cardinality() == 3 and len(w) == 3
    assert w.element_spec == fl.TensorSpec((), np.dtype(np.int64))
    assert w.batch(2).element_spec == fl.TensorSpec((None,), np.dtype(np.int64))


def test_window_of_varying_shapes():
    ds = fl.Dataset.from_tensor_slices([1, 3]).map(lambda n: np.zeros(n)).window(2)
    (w,) = list(ds)
    assert w.element_spec == fl.TensorSpec((None,), np.dtype(np.float64))


def test_window_of_empty_dataset():
    assert list(fl.Dataset.range(0).window(2)) == []
    assert fl.Dataset.range(0).window(2).cardinality() == 0
    assert fl.Dataset.range(2).window(3, drop_remainder=True).cardinality() == 0


def test_window_cardinality_of_infinite_and_unknown():
    assert fl.Dataset.range(2).repeat().window(3).cardinality() == fl.INFINITE
    assert fl.Dataset.range(2).filter(lambda x: True).window(3).cardinality() == fl.UNKNOWN


@pytest.mark.parametrize("kwargs", [{"size": 0}, {"size": 2, "shift": 0},
                                    {"size": 2, "stride": -1}])
def test_window_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError, match=r"window\("):
        fl.Dataset.range(3).window(**kwargs)


@pytest.mark.parametrize("kwargs", [{"size": 2.0}, {"size": 2, "shift": True},
                                    {"size": 2, "stride": 1.0}])
def test_window_rejects_non_integer_arguments(kwargs):
    with pytest.raises(TypeError, match=r"window\("):
        fl.Dataset.range(3).window(**kwargs)


def test_failed_element_fails_only_the_windows_holding_it():
    def fail_on_2(x):
        if x == 2:
            raise KeyError("bad")
        return x

    ds = fl.Dataset.range(7).map(fail_on_2).window(3, 1, 2, drop_remainder=True)
    it = ds._make_iterator(IteratorContext())
    with pytest.raises(KeyError):  # window [0, 2, 4]
        next(it)
    assert [int(x) for x in next(it)] == [1, 3, 5]
    with pytest.raises(KeyError):  # window [2, 4, 6]
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    # a failed element skipped by the stride, or discarded by the shift, is in no window
    assert windows(fl.Dataset.range(6).map(fail_on_2).window(2, 3, 3)) == [[0, 3], [3]]
    assert windows(fl.Dataset.range(6).map(fail_on_2).window(1, 4)) == [[0], [4]]


def test_failed_element_survives_a_checkpoint():
    def fail_on_1(x):
        if x == 1:
            raise KeyError("bad")
        return x

    ds = fl.Dataset.range(4).map(fail_on_1).window(2, 1)
    it = ds._make_iterator(IteratorContext())
    with pytest.raises(KeyError):
        next(it)  # [0, 1]
    state = json.loads(json.dumps(it.state_dict()))
    restored = ds._make_iterator(IteratorContext())
    restored.load_state_dict(state)
    # Saved again after the restore, the failure is recorded as it was the first time.
    assert restored.state_dict()["buffer"] == state["buffer"] == [{"failed": "KeyError: 'bad'"}]
    with pytest.raises(KeyError, match="bad") as info:
        next(restored)  # [1, 2]: the failure keeps its type across the checkpoint
    assert isinstance(info.value, RestoredElementError)
    assert isinstance(info.value, fl.RestoredError)
    assert [int(x) for x in next(restored)] == [2, 3]


def test_window_elements_must_share_a_structure():
    ds = fl.Dataset.range(2).map(lambda x: (x,) if x == 0 else (x, x))
    with pytest.raises(fl.StructureError, match="element 1 of window 0"):
        list(ds.window(2))


@pytest.mark.parametrize("size, shift, stride, drop", [(3, 2, 1, False), (3, 1, 2, False),
                                                       (2, 4, 1, False), (3, 1, 2, True)])
def test_window_checkpointing(size, shift, stride, drop):
    ds = fl.Dataset.range(9).window(size, shift, stride, drop)
    check_checkpointing(ds)
    check_checkpointing(ds.flat_map(lambda w: w.batch(size)))


def test_nested_window_checkpointing():
    ds = fl.Dataset.from_tensor_slices(([1, 2, 3, 4, 5], [b"a", b"b", b"c", b"d", b"e"]))
    check_checkpointing(ds.window(2, 1, 2).flat_map(
        lambda x, y: fl.Dataset.zip((x.batch(2), y.batch(2)))))


def test_windows_round_trip_through_the_state_codec():
    from feedline.core import state_codec

    w = ElementListDataset([np.arange(2), np.arange(3)])
    restored = state_codec.decode(json.loads(json.dumps(state_codec.encode((w, b"x")))))
    assert restored[0] == w and restored[1] == b"x"
    assert w != ElementListDataset([np.arange(2)])


@pytest.mark.parametrize("size, shift, stride", [(3, 2, 1), (2, 1, 1), (2, 3, 2)])
def test_checkpointing_restores_failing_elements_in_place(size, shift, stride):
    # a failed element fails every window holding it, before and after the checkpoint
    ds = fail_at(fl.Dataset.range(9), [1, 6]).window(size, shift, stride)
    check_checkpointing(ds)
    check_checkpointing(ds.flat_map(lambda w: w.batch(size)))
