import numpy as np
import pytest

import feedline as fl
from feedline.testing import assert_elements_equal, check_checkpointing, fail_at


def fill_dataset():
    """tf.data's documentation example: A = range(1, 5).map(lambda x: fill([x], x)), int32."""
    return fl.Dataset.range(1, 5, dtype=np.int32).map(lambda x: np.full([x], x, np.int32))


def lists(ds):
    return [b.tolist() for b in ds]


# The examples of tf.data.Dataset.padded_batch's documentation.
def test_pad_to_longest_in_batch():
    out = list(fill_dataset().padded_batch(2))
    assert [b.tolist() for b in out] == [[[1, 0], [2, 2]], [[3, 3, 3, 0], [4, 4, 4, 4]]]
    assert out[0].dtype == np.int32


def test_pad_to_fixed_size_and_value():
    assert lists(fill_dataset().padded_batch(2, padded_shapes=5)) == [
        [[1, 0, 0, 0, 0], [2, 2, 0, 0, 0]], [[3, 3, 3, 0, 0], [4, 4, 4, 4, 0]]]
    assert lists(fill_dataset().padded_batch(2, padded_shapes=5, padding_values=-1)) == [
        [[1, -1, -1, -1, -1], [2, 2, -1, -1, -1]], [[3, 3, 3, -1, -1], [4, 4, 4, 4, -1]]]


def test_components_padded_independently():
    elements = [([1, 2, 3], [10]), ([4, 5], [11, 12])]
    ds = fl.Dataset.from_generator(lambda: iter(elements)).map(
        lambda a, b: (np.asarray(a, np.int32), np.asarray(b, np.int32)))
    out = list(ds.padded_batch(2, padded_shapes=([4], [None]), padding_values=(-1, 100)))
    assert_elements_equal(out, [(np.array([[1, 2, 3, -1], [4, 5, -1, -1]], np.int32),
                                 np.array([[10, 100], [11, 12]], np.int32))])


def test_none_in_padding_values_is_the_default_for_that_part():
    # tf.data (_padding_values_or_default): None for a leaf, or for a whole tuple or dict,
    # pads that part with its dtype's default (0, b"").
    ds = fl.Dataset.from_tensor_slices([1, 3]).map(
        lambda n: (np.full(n, n, np.int32), b"x" * n, {"ids": np.arange(n), "w": np.ones(n)}))
    out = list(ds.padded_batch(2, padding_values=(-1, None, None)))
    assert_elements_equal(out, [(
        np.array([[1, -1, -1], [3, 3, 3]], np.int32), np.array([b"x", b"xxx"], dtype=object),
        {"ids": np.array([[0, 0, 0], [0, 1, 2]]), "w": np.array([[1.0, 0, 0], [1, 1, 1]])})])
    inner = list(ds.padded_batch(2, padding_values=(None, b"", {"ids": -7, "w": None})))
    assert inner[0][2]["ids"].tolist() == [[0, -7, -7], [0, 1, 2]]
    assert inner[0][0].tolist() == [[1, 0, 0], [3, 3, 3]]
    with pytest.raises(ValueError, match="padding_values must have the elements' structure"):
        list(ds.padded_batch(2, padding_values=(-1, None, {"ids": 0})))


def test_single_padding_value_for_every_component():
    a = fill_dataset()
    out = list(fl.Dataset.zip((a, a)).padded_batch(2, padding_values=-1))
    first = np.array([[1, -1], [2, 2]], np.int32)
    second = np.array([[3, 3, 3, -1], [4, 4, 4, 4]], np.int32)
    assert_elements_equal(out, [(first, first), (second, second)])


def test_multi_dimensional_and_scalar_leaves():
    ds = fl.Dataset.from_tensor_slices([1, 2]).map(
        lambda n: {"m": np.ones((n, 3 - n)), "s": n})
    (batch,) = list(ds.padded_batch(2))
    assert batch["m"].shape == (2, 2, 2)
    assert batch["m"].tolist() == [[[1, 1], [0, 0]], [[1, 0], [1, 0]]]
    assert batch["s"].tolist() == [1, 2]


def test_bytes_leaves_pad_with_empty_bytes_or_given_value():
    ds = fl.Dataset.from_tensor_slices([1, 3]).map(
        lambda n: ([b"w%d" % i for i in range(int(n))], b"s"))
    ds = ds.map(lambda words, s: (np.array(words, dtype=object), s))
    words, scalars = next(iter(ds.padded_batch(2)))
    assert words.dtype == object and words.tolist() == [[b"w0", b"", b""], [b"w0", b"w1", b"w2"]]
    assert scalars.tolist() == [b"s", b"s"]
    words, _ = next(iter(ds.padded_batch(2, padding_values=(b"<pad>", b""))))
    assert words.tolist() == [[b"w0", b"<pad>", b"<pad>"], [b"w0", b"w1", b"w2"]]


def test_str_leaves_become_bytes_and_pad_with_empty_bytes():
    ds = fl.Dataset.from_tensor_slices([1, 2]).map(lambda n: np.array(["a"] * int(n), dtype=object))
    assert lists(ds.padded_batch(2)) == [[[b"a", b""], [b"a", b"a"]]]
    # A str padding value is tf.string too: bytes.
    assert lists(ds.padded_batch(2, padding_values="-")) == [[[b"a", b"-"], [b"a", b"a"]]]


def test_remainder_and_drop_remainder():
    assert len(list(fill_dataset().padded_batch(3))) == 2
    assert lists(fill_dataset().padded_batch(3, drop_remainder=True)) == [
        [[1, 0, 0], [2, 2, 0], [3, 3, 3]]]
    assert fill_dataset().padded_batch(3).cardinality() == 2
    assert fill_dataset().padded_batch(3, drop_remainder=True).cardinality() == 1


def test_empty_dataset_and_empty_elements():
    assert list(fl.Dataset.range(0).map(lambda x: np.zeros(x)).padded_batch(2)) == []
    ds = fl.Dataset.from_tensor_slices([0, 0]).map(lambda n: np.zeros(n, np.int64))
    (batch,) = list(ds.padded_batch(2))
    assert batch.shape == (2, 0)


def test_element_larger_than_padded_shape_names_element_leaf_and_sizes():
    # tf.data 2.21: DataLossError "Attempted to pad to a smaller size than the input element."
    ds = fl.Dataset.range(1, 5).map(lambda x: (x, np.full([x], x)))
    it = iter(ds.padded_batch(2, padded_shapes=([], [3])))
    first = next(it)
    assert [a.tolist() for a in first] == [[1, 2], [[1, 0, 0], [2, 2, 0]]]
    with pytest.raises(fl.DataLossError) as info:
        next(it)
    assert not isinstance(info.value, ValueError)
    with pytest.raises(StopIteration):  # the failed batch took the input's last elements
        next(it)
    message = str(info.value)
    assert "Attempted to pad to a smaller size than the input element" in message
    assert "leaf [1] of input element 3 has shape (4,)" in message
    assert "padded shape (3,)" in message and "(4 > 3)" in message
    assert any("padded_batch" in note and "input element 1" in note
               for note in info.value.__notes__)


def test_rank_mismatch_is_an_error():
    ds = fl.Dataset.range(1, 3).map(lambda x: np.zeros([x] * int(x)))
    with pytest.raises(fl.StructureError, match=r"input element 1 has rank 2 \(shape \(2, 2\)\), "
                                                r"but element 0's rank is 1"):
        list(ds.padded_batch(2))
    with pytest.raises(fl.StructureError, match="the padded shape's rank is 2"):
        list(fl.Dataset.range(1, 3).map(lambda x: np.zeros(x)).padded_batch(2, [3, 3]))


def test_wrong_structures_are_errors():
    ds = fl.Dataset.range(1, 3).map(lambda x: (np.zeros(x), np.zeros(x)))
    with pytest.raises(ValueError, match=r"padded_shapes must have the elements' structure"):
        list(ds.padded_batch(2, padded_shapes=([3],)))
    with pytest.raises(ValueError, match=r"padding_values must have the elements' structure"):
        list(ds.padded_batch(2, padding_values=(0, 0, 0)))
    dicts = fl.Dataset.from_tensor_slices({"a": [[1], [2]]})
    with pytest.raises(ValueError, match=r"expected keys \['a'\], got \['b'\]"):
        dicts.padded_batch(2, padded_shapes={"b": [2]})
    mixed = fl.Dataset.range(2).map(lambda x: (x,) if x == 0 else (x, x))
    with pytest.raises(fl.StructureError, match="input element 1 is"):
        list(mixed.padded_batch(2))


def test_bad_padding_values_are_errors():
    with pytest.raises(TypeError, match="does not fit its dtype"):
        list(fill_dataset().padded_batch(2, padding_values=1.5))
    with pytest.raises(TypeError, match="must be bytes or str"):
        list(fl.Dataset.from_tensor_slices([b"a"]).padded_batch(1, padding_values=0))
    with pytest.raises(ValueError, match="must be scalars"):
        list(fill_dataset().padded_batch(2, padding_values=np.array([1, 2])))
    with pytest.raises(ValueError, match="invalid dimension"):
        list(fill_dataset().padded_batch(2, padded_shapes=[-3]))


def test_static_checks_at_construction():
    ds = fl.Dataset.from_tensor_slices(np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"not compatible with the input's shape \(3,\)"):
        ds.padded_batch(2, padded_shapes=[2])
    with pytest.raises(ValueError, match="not compatible"):
        ds.padded_batch(2, padded_shapes=[3, 1])
    with pytest.raises(TypeError, match="does not fit its dtype"):
        fl.Dataset.range(3).padded_batch(2, padding_values=0.5)


def test_element_spec():
    ds = fl.Dataset.from_tensor_slices(np.zeros((4, 3), np.float32))
    assert ds.padded_batch(2).element_spec == fl.TensorSpec((None, 3), np.dtype(np.float32))
    assert ds.padded_batch(2, [5], drop_remainder=True).element_spec == fl.TensorSpec(
        (2, 5), np.dtype(np.float32))
    assert ds.padded_batch(2, [None]).element_spec == fl.TensorSpec((None, None),
                                                                     np.dtype(np.float32))


def test_padded_batch_checkpointing():
    check_checkpointing(fill_dataset().padded_batch(3))
    ds = fl.Dataset.range(1, 6).map(lambda x: (np.full([x], x), b"x" * int(x)))
    check_checkpointing(ds.padded_batch(2, padded_shapes=([6], []), padding_values=(-1, b"")))
    check_checkpointing(ds.padded_batch(2, drop_remainder=True))


def test_checkpointing_restores_failing_elements_in_place():
    ds = fail_at(fl.Dataset.range(1, 9).map(lambda x: np.arange(x)), [2, 3]).padded_batch(2)
    check_checkpointing(ds, constant_state_size=True)
