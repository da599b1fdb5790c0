import numpy as np
import pytest

import feedline as fl
from feedline.testing import assert_elements_equal, check_checkpointing, fail_at


def lists(ds):
    return [b.tolist() for b in ds]


# The examples of tf.data.Dataset.rebatch's documentation.
def test_tf_data_documented_examples():
    assert lists(fl.Dataset.range(6).batch(2).rebatch(3)) == [[0, 1, 2], [3, 4, 5]]
    assert lists(fl.Dataset.range(7).batch(4).rebatch(3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert lists(fl.Dataset.range(7).batch(2).rebatch(3, drop_remainder=True)) == [
        [0, 1, 2], [3, 4, 5]]
    assert lists(fl.Dataset.range(8).batch(4).rebatch([2, 1, 1])) == [
        [0, 1], [2], [3], [4, 5], [6], [7]]


def test_rebatch_equals_unbatch_batch():
    for size in (1, 2, 3, 5, 11):
        for drop in (False, True):
            expected = lists(fl.Dataset.range(10).batch(3).unbatch().batch(size, drop))
            assert lists(fl.Dataset.range(10).batch(3).rebatch(size, drop)) == expected


def test_rebatch_list_cycles_across_input_batches():
    assert lists(fl.Dataset.range(7).batch(3).rebatch([2, 3])) == [[0, 1], [2, 3, 4], [5, 6]]


def test_rebatch_zero_sizes_give_empty_batches():
    out = list(fl.Dataset.range(4).batch(2).rebatch([0, 2]))
    # As tf.data's kernel: a size-0 batch does not read the input, so the end is only found by
    # the size-2 batch after the last empty one.
    assert [b.tolist() for b in out] == [[], [0, 1], [], [2, 3], []]
    assert out[0].dtype == np.int64 and out[0].shape == (0,)


def test_rebatch_nested_bytes_and_rows_of_arrays():
    ds = fl.Dataset.from_tensor_slices((np.arange(10).reshape(5, 2), [b"a", b"b", b"c", b"d",
                                                                      b"e"]))
    out = list(ds.batch(2).rebatch(3))
    expected = [(np.arange(6).reshape(3, 2), np.array([b"a", b"b", b"c"], dtype=object)),
                (np.arange(6, 10).reshape(2, 2), np.array([b"d", b"e"], dtype=object))]
    assert_elements_equal(out, expected)


def test_rebatch_of_empty_dataset():
    assert list(fl.Dataset.range(0).batch(2).rebatch(3)) == []


@pytest.mark.parametrize("size", [0, -1, [], [0, 0], [1, -1]])
def test_rebatch_rejects_bad_sizes(size):
    with pytest.raises(ValueError, match=r"rebatch\(batch_size\)"):
        fl.Dataset.range(4).batch(2).rebatch(size)


@pytest.mark.parametrize("size", [2.5, [[1]], True, [1, 2.0]])
def test_rebatch_rejects_non_integer_sizes(size):
    with pytest.raises(TypeError, match=r"rebatch\(batch_size"):
        fl.Dataset.range(4).batch(2).rebatch(size)


def test_rebatch_accepts_numpy_sizes():
    for size in (np.int64(3), np.array(3), [np.int32(3)], np.array([3])):
        ds = fl.Dataset.range(6).batch(4).rebatch(size)
        assert ds.batch_sizes == [3] and type(ds.batch_sizes[0]) is int
        assert [b.tolist() for b in ds] == [[0, 1, 2], [3, 4, 5]]


def test_rebatch_needs_batched_input():
    with pytest.raises(ValueError, match="scalar"):
        fl.Dataset.range(4).rebatch(2)
    with pytest.raises(fl.StructureError, match="scalar"):
        list(fl.Dataset.range(4).map(lambda x: x).rebatch(2))


def test_rebatch_rows_of_different_shapes():
    ds = fl.Dataset.from_tensor_slices([1, 2]).map(lambda n: np.zeros((1, n)))
    with pytest.raises(fl.StructureError, match="different shapes"):
        list(ds.rebatch(2))


def test_rebatch_spec_and_cardinality():
    ds = fl.Dataset.range(8).batch(4, drop_remainder=True)
    assert ds.rebatch(2).element_spec == fl.TensorSpec((2,), np.dtype(np.int64))
    assert ds.rebatch(3).element_spec == fl.TensorSpec((None,), np.dtype(np.int64))
    assert ds.rebatch(3, drop_remainder=True).element_spec == fl.TensorSpec(
        (3,), np.dtype(np.int64))
    assert ds.rebatch([2, 1]).element_spec == fl.TensorSpec((None,), np.dtype(np.int64))
    assert ds.rebatch(2).cardinality() == fl.UNKNOWN


@pytest.mark.parametrize("size, drop", [(3, False), (3, True), ([2, 0, 1], False), (5, False)])
def test_rebatch_checkpointing(size, drop):
    check_checkpointing(fl.Dataset.range(11).batch(4).rebatch(size, drop))


def test_rebatch_zero_size_without_static_spec_reads_shape_from_input():
    ds = fl.Dataset.range(4).map(lambda x: np.full((1, 3), x)).rebatch([0, 2])
    out = list(ds)
    assert [b.shape for b in out] == [(0, 3), (2, 3), (0, 3), (2, 3), (0, 3)]
    assert list(fl.Dataset.range(0).map(lambda x: np.zeros((1, 3))).rebatch([0, 2])) == []


def test_checkpointing_restores_failing_elements_in_place():
    check_checkpointing(fail_at(fl.Dataset.range(12).batch(4), [1]).rebatch([3, 2]))
