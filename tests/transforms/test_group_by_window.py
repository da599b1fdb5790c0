"""group_by_window against what tf.data 2.21 returned (tests/data/tfdata_golden/group_by_window.json,
recorded by record.py with the same functions as CASES here)."""

import sys
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.testing import check_checkpointing, fail_at

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "tfdata_golden"))
import golden  # noqa: E402

GOLDEN = golden.load("group_by_window")
r13 = fl.Dataset.range(13)
pairs = fl.Dataset.from_tensor_slices((np.arange(10), np.arange(10) * 2.5))
dicts = fl.Dataset.from_tensor_slices({"id": np.arange(7), "name": [
    b"a", b"bb", b"c", b"dd", b"e", b"ff", b"g"]})

CASES = {
    "mod5_window4": lambda: r13.group_by_window(
        lambda x: (x * 7) % 5, lambda key, window: window.batch(4), window_size=4),
    "window_size_func": lambda: fl.Dataset.range(20).group_by_window(
        lambda x: x % 3, lambda key, window: window.batch(10),
        window_size_func=lambda key: key + 2),
    "negative_keys": lambda: r13.group_by_window(
        lambda x: 2 - x % 4 * 3, lambda key, window: window.batch(5), window_size=2),
    "reduce_uses_key": lambda: r13.group_by_window(
        lambda x: x % 2, lambda key, window: window.map(lambda x: x * 100 + key), window_size=3),
    "several_outputs_per_window": lambda: fl.Dataset.range(17).group_by_window(
        lambda x: x % 2, lambda key, window: window.batch(2), window_size=5),
    "empty_reduce": lambda: r13.group_by_window(
        lambda x: x % 3, lambda key, window: window.filter(lambda x: x % 2 == 0).batch(9),
        window_size=3),
    "tuple_elements": lambda: pairs.group_by_window(
        lambda a, b: a % 3, lambda key, window: window.batch(2), window_size=2),
    "dict_elements": lambda: dicts.group_by_window(
        lambda d: len(d["name"]), lambda key, window: window.batch(3), window_size=3),
    "window_size_1": lambda: fl.Dataset.range(5).group_by_window(
        lambda x: x % 2, lambda key, window: window.batch(3), window_size=1),
    "empty_input": lambda: fl.Dataset.range(0).group_by_window(
        lambda x: x, lambda key, window: window.batch(2), window_size=2),
}


def test_every_golden_case_is_tested():
    assert sorted(CASES) == sorted(GOLDEN)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_tensorflow(name):
    dataset = CASES[name]()
    expected = GOLDEN[name]
    golden.same(list(dataset), [golden.decode(e) for e in expected["output"]])
    assert dataset.cardinality() == expected["cardinality"] == fl.UNKNOWN


@pytest.mark.parametrize("name", ["mod5_window4", "window_size_func", "reduce_uses_key",
                                  "several_outputs_per_window", "tuple_elements",
                                  "dict_elements"])
def test_checkpointing(name):
    check_checkpointing(CASES[name]())


def test_checkpointing_with_shuffled_input_and_inner_shuffle():
    ds = fl.Dataset.range(30).shuffle(7, seed=2).group_by_window(
        lambda x: x % 4, lambda key, window: window.shuffle(3, seed=5).batch(2), window_size=5)
    check_checkpointing(ds)


def test_exactly_one_window_size_argument():
    for kwargs in ({}, {"window_size": 2, "window_size_func": lambda k: 2}):
        with pytest.raises(ValueError, match="either window_size or window_size_func"):
            fl.Dataset.range(3).group_by_window(lambda x: x, lambda k, w: w, **kwargs)
    with pytest.raises(ValueError, match=r"window_size\) must be a positive int, got 0"):
        fl.Dataset.range(3).group_by_window(lambda x: x, lambda k, w: w, window_size=0)
    with pytest.raises(TypeError, match="needs a callable reduce_func"):
        fl.Dataset.range(3).group_by_window(lambda x: x, None, window_size=1)


def test_bad_keys_fail_their_element_and_the_rest_goes_on():
    ds = fl.Dataset.range(6).group_by_window(
        lambda x: 1.5 if x == 2 else x % 2, lambda k, w: w.batch(9), window_size=9)
    it = iter(ds)
    with pytest.raises(TypeError, match="key_func must return an integer scalar") as info:
        next(it)
    assert "at input element 2" in "\n".join(info.value.__notes__)
    assert [b.tolist() for b in it] == [[0, 4], [1, 3, 5]]


def test_window_size_func_errors():
    ds = fl.Dataset.range(4).group_by_window(lambda x: x % 2, lambda k, w: w.batch(9),
                                             window_size_func=lambda key: key * 2 - 1)
    it = iter(ds)
    with pytest.raises(ValueError, match="window_size_func returned -1 for key 0"):
        next(it)
    assert next(it).tolist() == [1]
    # No size was recorded for key 0: the next element of key 0 asks (and fails) again.
    with pytest.raises(ValueError, match="for key 0") as info:
        next(it)
    assert "at input element 2" in "\n".join(info.value.__notes__)
    assert [b.tolist() for b in it] == [[3]]


def test_reduce_func_must_return_a_dataset_and_its_failure_drops_the_window():
    def reduce(key, window):
        if key == 0:
            raise KeyError("no")
        return window.batch(5)

    it = iter(fl.Dataset.range(6).group_by_window(lambda x: x % 2, reduce, window_size=3))
    with pytest.raises(KeyError) as info:
        next(it)
    assert "reducing the window of key 0" in "\n".join(info.value.__notes__)
    assert [b.tolist() for b in it] == [[1, 3, 5]]
    bad = fl.Dataset.range(2).group_by_window(lambda x: x, lambda k, w: [1], window_size=1)
    with pytest.raises(TypeError, match="reduce_func must return a feedline Dataset, got list"):
        next(iter(bad))


def test_errors_inside_the_reduced_dataset_keep_their_place():
    ds = fl.Dataset.range(6).group_by_window(
        lambda x: x % 2, lambda k, w: w.map(lambda x: 10 // int(x - 3)), window_size=3)
    it = iter(ds)
    assert [int(next(it)) for _ in range(4)] == [-4, -10, 10, -5]
    with pytest.raises(ZeroDivisionError) as info:
        next(it)
    assert "made from the window of key 1" in "\n".join(info.value.__notes__)
    assert [int(x) for x in it] == [5]


def test_input_errors_pass_and_checkpoint():
    ds = fail_at(fl.Dataset.range(12), [3, 7]).group_by_window(
        lambda x: x % 3, lambda k, w: w.batch(3), window_size=3)
    check_checkpointing(ds)


def test_window_elements_keep_their_structure_and_key_is_int64():
    seen = []

    def reduce(key, window):
        seen.append(key)
        return window.map(lambda a, b: (a, b, key))

    ds = pairs.take(4).group_by_window(lambda a, b: a // 2, reduce, window_size=2)
    out = [(int(a), float(b), int(k)) for a, b, k in ds]
    assert out == [(0, 0.0, 0), (1, 2.5, 0), (2, 5.0, 1), (3, 7.5, 1)]
    assert all(type(k) is np.int64 for k in seen)


def test_state_holds_the_open_groups():
    it = fl.Dataset.range(7).group_by_window(
        lambda x: x % 3, lambda k, w: w.batch(9), window_size=3)._make_iterator(IteratorContext())
    assert next(it).tolist() == [0, 3, 6]
    state = it.state_dict()
    # Key 0's window stays while its dataset is read (a restore makes the dataset again).
    assert [key for key, _ in state["groups"]] == [0, 1, 2] and state["current"][0] == 0
    assert next(it).tolist() == [1, 4]
    state = it.state_dict()
    assert [key for key, _ in state["groups"]] == [1, 2] and state["current"][0] == 1


def test_worker_shards_group_their_own_elements():
    from feedline.distribute.autoshard import plan_sharding, shard_pipeline

    ds = fl.Dataset.range(40).map(lambda x: x * 2).group_by_window(
        lambda x: x % 3, lambda key, window: window.batch(4), window_size=4)
    assert plan_sharding(ds, 2).policy == "data"
    shards = [int(x) for i in range(2) for batch in shard_pipeline(ds, 2, i) for x in batch]
    assert sorted(shards) == list(range(0, 80, 2))


CARDINALITY_INPUTS = {"finite": fl.Dataset.range(10), "empty": fl.Dataset.range(0),
                      "endless": fl.Dataset.range(10).repeat()}
CARDINALITY_CASES = {
    "group_by_window": lambda ds: ds.group_by_window(lambda x: x % 2, lambda k, w: w.batch(2),
                                                     window_size=2),
    "bucket_by_sequence_length": lambda ds: ds.bucket_by_sequence_length(
        lambda x: 1, [3], [2, 2], no_padding=True),
    "ragged_batch": lambda ds: ds.map(lambda x: np.arange(x)).ragged_batch(3),
    "ragged_batch_drop_remainder": lambda ds: ds.map(lambda x: np.arange(x)).ragged_batch(
        3, drop_remainder=True),
    "rejection_resample_as_is": lambda ds: ds.rejection_resample(
        lambda x: x % 2, [0.5, 0.5], [0.5, 0.5], seed=1),
    "rejection_resample_mixing": lambda ds: ds.rejection_resample(
        lambda x: x % 2, [0.5, 0.5], [0.8, 0.2], seed=1),
    "rejection_resample_filter_only": lambda ds: ds.rejection_resample(
        lambda x: x % 2, [1.0, 0.0], [0.8, 0.2], seed=1),
    "rejection_resample_estimated": lambda ds: ds.rejection_resample(
        lambda x: x % 2, [0.5, 0.5], seed=1),
}


@pytest.mark.parametrize("name", sorted(CARDINALITY_CASES))
def test_cardinality_matches_tensorflow(name):
    """Of this module's operation and the other issue-30 ones (cardinality.json)."""
    expected = golden.load("cardinality")[name]
    assert sorted(expected) == sorted(CARDINALITY_INPUTS)
    for input_name, ds in CARDINALITY_INPUTS.items():
        assert CARDINALITY_CASES[name](ds).cardinality() == expected[input_name], input_name


def test_keys_and_window_sizes_must_be_int64_as_in_tf_data():
    # tf.data: "Tensor conversion requested dtype int64 for Tensor with dtype int32";
    # feedline grouped by int32 keys without a word.
    keyed_int32 = fl.Dataset.range(4).group_by_window(
        lambda x: (x % 2).astype(np.int32), lambda k, w: w.batch(9), window_size=9)
    with pytest.raises(ValueError, match=r"key_func returned an int32 value: Tensor conversion "
                                         r"requested dtype int64 for Tensor with dtype int32"):
        list(keyed_int32)
    for key in (lambda x: x > 1, lambda x: (x % 2).astype(np.uint64)):
        with pytest.raises(ValueError, match="requested dtype int64"):
            list(fl.Dataset.range(4).group_by_window(key, lambda k, w: w, window_size=2))
    vector = fl.Dataset.range(4).group_by_window(lambda x: np.stack([x, x]),
                                                 lambda k, w: w, window_size=2)
    with pytest.raises(ValueError, match=r"Invalid `key_func`. `key_func` must return a single "
                                         r"int64 scalar tensor but its return type is "
                                         r"TensorSpec\(shape=\(2,\), dtype=int64\)"):
        list(vector)
    sized_int32 = fl.Dataset.range(4).group_by_window(
        lambda x: x % 2, lambda k, w: w.batch(9), window_size_func=lambda k: np.int32(2))
    with pytest.raises(ValueError, match="window_size_func returned an int32 value"):
        list(sized_int32)
    # Python ints are converted, as tf.data converts them.
    ok = fl.Dataset.range(4).group_by_window(lambda x: 1, lambda k, w: w.batch(9),
                                             window_size_func=lambda k: 2)
    assert [b.tolist() for b in ok] == [[0, 1], [2, 3]]
