"""Dataset.from_tensor_slices and Dataset.from_tensors."""

import collections

import numpy as np
import pytest

import feedline as fl
from feedline.core.random_access import open_reader
from feedline.testing import assert_elements_equal, check_checkpointing

Point = collections.namedtuple("Point", ["x", "y"])


# ----------------------------------------------------------------- from_tensor_slices
def test_list_slices_into_int32_scalars():
    # tf.data converts a list of Python ints to an int32 tensor (TensorFlow 2.21).
    ds = fl.Dataset.from_tensor_slices([1, 2, 3])
    out = list(ds)
    assert_elements_equal(out, [np.int32(1), np.int32(2), np.int32(3)])
    assert ds.cardinality() == 3
    assert ds.element_spec == fl.TensorSpec((), np.dtype(np.int32))
    check_checkpointing(ds)


def test_matrix_slices_into_rows():
    matrix = np.arange(6, dtype=np.float32).reshape(3, 2)
    ds = fl.Dataset.from_tensor_slices(matrix)
    assert_elements_equal(list(ds), list(matrix))
    assert ds.element_spec == fl.TensorSpec((2,), np.dtype(np.float32))
    check_checkpointing(ds)


def test_nested_list_becomes_one_array():
    # As tf.data: a list is one tensor, not a tuple of components.
    ds = fl.Dataset.from_tensor_slices([[1, 2], [3, 4]])
    assert [x.tolist() for x in ds] == [[1, 2], [3, 4]]


def test_tuple_components():
    ds = fl.Dataset.from_tensor_slices(([1, 2], [b"a", b"b"], np.array([[1.0], [2.0]])))
    out = list(ds)
    assert_elements_equal(out, [(np.int32(1), b"a", np.array([1.0])),
                                (np.int32(2), b"b", np.array([2.0]))])
    assert isinstance(out[0][1], bytes)
    assert ds.element_spec == (fl.TensorSpec((), np.dtype(np.int32)),
                               fl.TensorSpec((), np.dtype(object)),
                               fl.TensorSpec((1,), np.dtype(np.float64)))
    check_checkpointing(ds)


def test_dict_keeps_keys_and_order():
    ds = fl.Dataset.from_tensor_slices({"label": [0, 1], "image": np.zeros((2, 3, 3))})
    out = list(ds)
    assert list(out[0]) == ["label", "image"]
    assert int(out[1]["label"]) == 1 and out[1]["image"].shape == (3, 3)
    check_checkpointing(ds)


def test_namedtuple_and_nesting():
    ds = fl.Dataset.from_tensor_slices({"p": Point([1, 2], [3, 4]), "w": ([0.5, 1.5],)})
    out = list(ds)
    assert isinstance(out[0]["p"], Point)
    assert (int(out[1]["p"].x), int(out[1]["p"].y), float(out[1]["w"][0])) == (2, 4, 1.5)
    check_checkpointing(ds)


def test_bytes_and_str_leaves():
    ds = fl.Dataset.from_tensor_slices([b"x", b"yy", b""])
    assert list(ds) == [b"x", b"yy", b""]
    assert ds.element_spec == fl.TensorSpec((), np.dtype(object))
    check_checkpointing(ds)
    # str becomes UTF-8 bytes, as a tf.string tensor holds it
    assert list(fl.Dataset.from_tensor_slices(["a", "é"])) == [b"a", "é".encode()]


def test_empty_leading_dimension():
    ds = fl.Dataset.from_tensor_slices(np.zeros((0, 4)))
    assert list(ds) == [] and ds.cardinality() == 0
    assert ds.element_spec == fl.TensorSpec((4,), np.dtype(np.float64))
    check_checkpointing(ds)


def test_mismatched_leading_dimensions():
    with pytest.raises(fl.StructureError, match=r"different first dimensions.*\[0\]: 2.*\[1\]: 3"):
        fl.Dataset.from_tensor_slices(([1, 2], [1, 2, 3]))
    with pytest.raises(fl.StructureError, match=r"\['a'\]: 1, \['b'\]: 2"):
        fl.Dataset.from_tensor_slices({"a": [1], "b": [1, 2]})


def test_scalar_leaf_is_an_error():
    with pytest.raises(fl.StructureError, match=r"leaf \[1\] is a scalar"):
        fl.Dataset.from_tensor_slices(([1, 2], 5))
    with pytest.raises(fl.StructureError, match="scalar"):
        fl.Dataset.from_tensor_slices(7)
    with pytest.raises(fl.StructureError, match="scalar"):
        fl.Dataset.from_tensor_slices(b"abc")


def test_no_leaves_is_an_error():
    with pytest.raises(fl.StructureError, match="at least one leaf"):
        fl.Dataset.from_tensor_slices(())


def test_elements_are_views_not_shared_state_across_epochs():
    data = np.arange(4)
    ds = fl.Dataset.from_tensor_slices(data).repeat(2)
    assert [int(x) for x in ds] == [0, 1, 2, 3, 0, 1, 2, 3]
    check_checkpointing(fl.Dataset.from_tensor_slices(data), epochs=3)


# ----------------------------------------------------------------- from_tensors
def test_from_tensors_gives_one_element():
    ds = fl.Dataset.from_tensors([1, 2, 3])
    out = list(ds)
    assert len(out) == 1 and ds.cardinality() == 1
    assert_elements_equal(out, [np.array([1, 2, 3], np.int32)])
    assert ds.element_spec == fl.TensorSpec((3,), np.dtype(np.int32))
    check_checkpointing(ds)


def test_from_tensors_scalars_and_nests():
    element = {"id": 7, "name": b"seven", "pair": (1.5, np.float32(2))}
    ds = fl.Dataset.from_tensors(element)
    (out,) = list(ds)
    # tf.data: a Python int is int32, a Python float float32; NumPy values keep theirs.
    assert isinstance(out["id"], np.int32) and int(out["id"]) == 7
    assert out["name"] == b"seven"
    assert isinstance(out["pair"][0], np.float32) and out["pair"][1].dtype == np.float32
    assert ds.element_spec["pair"][1] == fl.TensorSpec((), np.dtype(np.float32))
    check_checkpointing(ds, epochs=3)


def test_from_tensors_namedtuple():
    (out,) = list(fl.Dataset.from_tensors(Point(1, [2, 3])))
    assert isinstance(out, Point) and out.y.tolist() == [2, 3]


def test_slices_state_keeps_one_size():
    ds = fl.Dataset.from_tensor_slices((np.arange(12), [b"x"] * 12))
    check_checkpointing(ds, constant_state_size=True, max_state_bytes=2048)


# ----------------------------------------------------------------- strings are bytes
def test_object_arrays_of_str_slice_into_bytes():
    # What dict(pandas_df) gives for a text column: an object array of Python str.
    # tf 2.21: from_tensor_slices({"a": np.array(["x", "é"], dtype=object)}) ->
    # {"a": b"x"}, {"a": b"\xc3\xa9"}; a mixed str/bytes array gives bytes too.
    ds = fl.Dataset.from_tensor_slices({"a": np.array(["x", "é"], dtype=object),
                                        "n": np.array([1, 2])})
    out = list(ds)
    assert [row["a"] for row in out] == [b"x", "é".encode()]
    assert all(type(row["a"]) is bytes for row in out)
    assert ds.element_spec["a"] == fl.TensorSpec((), np.dtype(object))
    assert list(fl.Dataset.from_tensor_slices(np.array(["x", b"y"], dtype=object))) == \
        [b"x", b"y"]
    # tf: from_tensor_slices(np.array([["x", "y"], ["z", "w"]], dtype=object))
    rows = list(fl.Dataset.from_tensor_slices(np.array([["x", "y"], ["z", "w"]], dtype=object)))
    assert [row.tolist() for row in rows] == [[b"x", b"y"], [b"z", b"w"]]
    # tf: from_tensors(np.array(["x", "y"], dtype=object)) -> array([b"x", b"y"])
    (whole,) = list(fl.Dataset.from_tensors(np.array(["x", "y"], dtype=object)))
    assert whole.dtype == object and whole.tolist() == [b"x", b"y"]
    check_checkpointing(ds)


def test_ragged_values_are_sliced_into_their_rows_as_tf_data_slices_a_ragged_tensor():
    # tf 2.21: from_tensor_slices(tf.ragged.constant([[1, 2], [], [3, 4, 5]], tf.int64)) ->
    # [1, 2], [], [3, 4, 5] (its element_spec RaggedTensorSpec([None], int64, ragged_rank=0),
    # which is a dense tensor per element: feedline's TensorSpec((None,), int64)).
    ragged = fl.RaggedValues(np.array([1, 2, 3, 4, 5]), np.array([0, 2, 2, 5]))
    ds = fl.Dataset.from_tensor_slices((ragged, np.array([10, 20, 30])))
    assert ds.element_spec == (fl.TensorSpec((None,), np.dtype(np.int64)),
                               fl.TensorSpec((), np.dtype(np.int64)))
    assert ds.cardinality() == 3
    assert_elements_equal(list(ds), [(np.array([1, 2]), np.int64(10)),
                                     (np.array([], np.int64), np.int64(20)),
                                     (np.array([3, 4, 5]), np.int64(30))])
    check_checkpointing(ds)
    with open_reader(ds) as reader:
        assert_elements_equal(reader.get_many([2, 0]), [(np.array([3, 4, 5]), np.int64(30)),
                                                       (np.array([1, 2]), np.int64(10))])
    # A row is a copy: changing an element does not change the source (tf.data's are values).
    first = next(iter(ds))[0]
    first[0] = 99
    assert ragged.to_list()[0] == [1, 2]
    assert [b.to_list() for b in ds.map(lambda row, n: row).ragged_batch(2)] == [
        [[1, 2], []], [[3, 4, 5]]]


def test_ragged_values_of_two_levels_slice_into_ragged_rows():
    # tf: from_tensor_slices(tf.ragged.constant([[[0, 1]], [[], [2, 3, 4, 5]]])) -> rows
    # <tf.RaggedTensor [[0, 1]]>, <tf.RaggedTensor [[], [2, 3, 4, 5]]>, spec
    # RaggedTensorSpec([None, None], int64, ragged_rank=1).
    ragged = fl.RaggedValues(np.arange(6), [np.array([0, 1, 3]), np.array([0, 2, 2, 6])])
    ds = fl.Dataset.from_tensor_slices({"t": ragged})
    assert ds.element_spec == {"t": fl.RaggedTensorSpec((None, None), np.dtype(np.int64), 1)}
    assert [e["t"].to_list() for e in ds] == [[[0, 1]], [[], [2, 3, 4, 5]]]


def test_ragged_values_must_have_the_other_leaves_rows():
    ragged = fl.RaggedValues.from_row_lengths([1, 2, 3], [2, 1])
    with pytest.raises(fl.StructureError, match=r"leaves have different first dimensions "
                                                r"\(\[0\]: 2, \[1\]: 3\)"):
        fl.Dataset.from_tensor_slices((ragged, np.arange(3)))
