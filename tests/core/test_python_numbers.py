"""Python numbers become elements with tf.data's dtypes; a dataset's dtypes stay fixed.

The expected dtypes are what TensorFlow 2.21 gives (``tf.constant(value).dtype``,
``tf.data.Dataset.from_tensors(value).element_spec`` and a ``map`` returning the value),
recorded with ``tensorflow-cpu==2.21.0``.
"""

import enum

import numpy as np
import pytest

import feedline as fl
from feedline.core.element_dtypes import DtypeGuard, leaf_dtype
from feedline.core.structure import normalize_output, python_number, sequence_array


class Color(enum.IntEnum):
    RED = 3


# value -> the dtype TensorFlow 2.21 converts it to (tf.constant / from_tensors).
TF_DTYPES = [
    (1, "int32"),
    (-(2**31), "int32"),
    (2**31, "int64"),
    (2**40, "int64"),
    (1.0, "float32"),
    (True, "bool"),
    (1j, "complex128"),
    (Color.RED, "int32"),
    (np.float64(1), "float64"),
    ([1, 2], "int32"),
    ([1, 2**40], "int64"),
    ([1, 2.5], "float32"),
    ([1, 2**40, 2.5], "float32"),
    ([True, False], "bool"),
    ([np.bool_(True), False], "bool"),
    ([np.float64(1), 2.0], "float64"),
    ([2.0, np.float64(1)], "float32"),
    ([np.int64(1), 2], "int32"),
    ([np.int16(1), 2], "int32"),
    ([np.uint8(1), 2], "int32"),
    ([np.float16(1), 2], "float16"),
    ([np.int32(1), 2.5], "float32"),
    ([1, np.float32(2)], "float32"),
    ([np.float32(1), np.float64(2)], "float32"),
    ([np.array([1, 2]), np.array([3, 4])], "int32"),
    ([np.zeros(2, np.float32)], "float32"),
    ([np.array([1.0, 2.0]), [3.0, 4.0]], "float64"),
    ([[1.0, 2.0], np.array([1.0, 2.0])], "float32"),
    ([[1], [2.5]], "float32"),
    ([np.array(2.0), 1], "float64"),
    ([np.longdouble(1)], "float32"),
    ([1j, 2], "complex128"),
    ([], "float32"),
    ([[], []], "float32"),
    ([np.zeros(0), np.zeros(0)], "float32"),
]


@pytest.mark.parametrize(("value", "dtype"), TF_DTYPES, ids=[repr(v) for v, _ in TF_DTYPES])
def test_from_tensors_converts_as_tensorflow(value, dtype):
    ds = fl.Dataset.from_tensors(value)
    assert ds.element_spec.dtype == np.dtype(dtype)
    (element,) = list(ds)
    assert np.asarray(element).dtype == np.dtype(dtype)


def _python_only(value):
    if isinstance(value, list):
        return all(_python_only(v) for v in value)
    return type(value) in (bool, int, float, complex)


PYTHON_LISTS = [(v, d) for v, d in TF_DTYPES if isinstance(v, list) and _python_only(v)]


@pytest.mark.parametrize(("value", "dtype"), PYTHON_LISTS,
                         ids=[repr(v) for v, _ in PYTHON_LISTS])
def test_a_list_nested_in_a_map_result_converts_as_tensorflow(value, dtype):
    # A list nested in a result is one tensor; the whole result as a list would be a tuple.
    ds = fl.Dataset.range(2).map(lambda _: {"v": value})
    assert ds.element_spec["v"].dtype == np.dtype(dtype)
    assert [np.asarray(e["v"]).dtype for e in ds] == [np.dtype(dtype)] * 2


# In a map function NumPy values stand for tf.data's tensors, and a list of tensors is packed
# with their dtype, Python numbers taking it. TF 2.21, range(1).map(lambda x: {"v": ...}):
PACKED = [
    (lambda x: [x, 2], "int64"),
    (lambda x: [np.float32(x), 2.5], "float32"),  # [tf.cast(x, tf.float32), 2.5]
    (lambda x: [2.5, np.float32(x)], "float32"),
    (lambda x: [np.float64(x), 2.5], "float64"),
    (lambda x: [[x], [1]], "int64"),
]


@pytest.mark.parametrize(("fn", "dtype"), PACKED, ids=[str(i) for i in range(len(PACKED))])
def test_a_list_of_numpy_values_in_a_map_result_is_packed_as_tensors(fn, dtype):
    ds = fl.Dataset.range(1).map(lambda x: {"v": fn(x)})
    assert ds.element_spec["v"].dtype == np.dtype(dtype)
    assert next(iter(ds))["v"].dtype == np.dtype(dtype)


@pytest.mark.parametrize(("fn", "match"), [
    (lambda x: [x, 2.5], "dtype int64 with Python floats"),
    (lambda x: [x, np.float32(x)], "dtype float32, int64 with each other"),
])
def test_lists_tensorflow_cannot_pack_are_refused(fn, match):
    # TF 2.21: TypeError "Unsupported return value from function passed to Dataset.map()".
    with pytest.raises(TypeError, match=match):
        list(fl.Dataset.range(1).map(lambda x: {"v": fn(x)}))


def test_map_results_take_tensorflow_dtypes():
    # tf.data.Dataset.range(2).map(lambda x: (1, 2.5, True, 2**40)).element_spec (TF 2.21):
    # (int32, float32, bool, int64).
    ds = fl.Dataset.range(2).map(lambda x: (1, 2.5, True, 2**40))
    dtypes = ["int32", "float32", "bool", "int64"]
    assert [s.dtype for s in ds.element_spec] == [np.dtype(d) for d in dtypes]
    first = next(iter(ds))
    assert [type(v).__name__ for v in first] == ["int32", "float32", "bool", "int64"]
    # Batching keeps them: the batch of float32 scalars is float32, as the spec says.
    batch = next(iter(ds.batch(2)))
    assert [b.dtype for b in batch] == [np.dtype(d) for d in dtypes]
    assert ds.batch(2).element_spec[1] == fl.TensorSpec((None,), np.dtype(np.float32))


def test_a_list_returned_whole_is_a_tuple_of_converted_components():
    # tf.data: map(lambda x: [1, 2**40]) -> (int32, int64), each component on its own.
    ds = fl.Dataset.range(1).map(lambda x: [1, 2**40, 2.5])
    assert [s.dtype.name for s in ds.element_spec] == ["int32", "int64", "float32"]


def test_numpy_values_keep_their_dtype():
    ds = fl.Dataset.range(3).map(lambda x: (x, x * np.float64(0.5), np.float16(1)))
    assert [s.dtype.name for s in ds.element_spec] == ["int64", "float64", "float16"]
    assert fl.Dataset.range(3).element_spec.dtype == np.dtype(np.int64)
    assert fl.Dataset.from_tensor_slices(np.arange(3)).element_spec.dtype == np.int64


def test_from_tensor_slices_converts_as_tensorflow():
    # list(tf.data.Dataset.from_tensor_slices({"a": [1, 2], "b": [1.0, 2.0]})
    #      .as_numpy_iterator()) on TF 2.21:
    # [{'a': np.int32(1), 'b': np.float32(1.0)}, {'a': np.int32(2), 'b': np.float32(2.0)}]
    out = list(fl.Dataset.from_tensor_slices({"a": [1, 2], "b": [1.0, 2.0]}))
    assert [(type(e["a"]), type(e["b"])) for e in out] == [(np.int32, np.float32)] * 2
    assert [(int(e["a"]), float(e["b"])) for e in out] == [(1, 1.0), (2, 2.0)]


@pytest.mark.parametrize("value", [[True, 1], [True, 1.5]])
def test_bools_then_numbers_are_refused_as_tensorflow_does(value):
    # TF 2.21: "Can't convert Python sequence with mixed types to Tensor."
    with pytest.raises(ValueError, match="mixes bools with other numbers"):
        fl.Dataset.from_tensors(value)


def test_python_bools_after_numbers_are_numbers_as_in_tensorflow():
    # TF 2.21: tf.constant([1, True]) is int32 [1, 1], tf.constant([1.5, True]) float32.
    assert fl.Dataset.from_tensors([1, True]).element_spec.dtype == np.int32
    assert fl.Dataset.from_tensors([1.5, True]).element_spec.dtype == np.float32


@pytest.mark.parametrize(("value", "match"), [
    (2**63, "beyond int64's range"),
    ([2**64], "beyond int64's range"),
    (1e300, "beyond float32's range"),
    ([1e300], "beyond float32's range"),
])
def test_values_tensorflow_cannot_convert_are_refused(value, match):
    # TF 2.21 raises ValueError for each ("out-of-range integer", "a value out of range").
    with pytest.raises(ValueError, match=match):
        fl.Dataset.from_tensors(value)


def test_special_floats_become_float32():
    values = [python_number(v) for v in (float("inf"), float("-inf"), float("nan"), 3.4e38)]
    assert all(type(v) is np.float32 for v in values)
    assert np.isinf(values[0]) and np.isnan(values[2])


def test_python_number_and_sequence_array_directly():
    assert type(python_number(False)) is np.bool_
    assert sequence_array([[1, 2], [3, 4]]).dtype == np.int32
    with pytest.raises(ValueError, match="ragged"):
        sequence_array([[1, 2], [3]])
    assert normalize_output({"k": 1.5})["k"].dtype == np.float32


def test_a_later_element_with_another_dtype_is_refused_by_the_guard():
    guard = DtypeGuard("map(f)")
    assert guard.check((np.float32(1), b"a"), 0) == (np.float32(1), b"a")
    assert guard.check((np.float32(2), b"b"), 1) == (np.float32(2), b"b")
    with pytest.raises(fl.StructureError) as caught:
        guard.check((np.int64(3), b"c"), 2)
    assert str(caught.value) == (
        "map(f): element 2 has dtype int64 at [0] where the dataset's elements have float32 "
        "(its element_spec, from element 0); a dataset's dtypes are fixed, as in tf.data: "
        "convert the value (np.float32(...), .astype(np.float32)) in the function")


def test_the_guard_leaves_none_to_batch_and_tells_arrays_by_dtype():
    guard = DtypeGuard("map(g)", [leaf_dtype(None), leaf_dtype(np.zeros(2))])
    guard.check((None, np.ones(5)), 7)  # shapes may vary; dtypes may not
    # None where a value was is a structure change (NoneTensorSpec), which batch names.
    assert guard.check((np.float64(1), np.ones(2)), 8)[0] == 1.0
    with pytest.raises(fl.StructureError, match=r"element 9 has dtype object at \[1\] where "
                                                r"the dataset's elements have float64"):
        guard.check((None, b"x"), 9)


@pytest.mark.parametrize("run", [
    lambda: list(fl.Dataset.range(5).scan(0, lambda s, x: (s + x, s + x))),
    lambda: fl.Dataset.range(5).reduce(0, lambda s, x: s + x),
], ids=["scan", "reduce"])
def test_a_python_zero_state_is_int32_so_int64_elements_are_refused(run):
    # TF 2.21 raises TypeError for both ("Input 'y' of 'AddV2' Op has type int64 that does
    # not match type int32 of argument 'x'"); ported code starts from np.int64(0).
    with pytest.raises(TypeError, match="int32"):
        run()
    assert fl.Dataset.range(5).reduce(np.int64(0), lambda s, x: s + x) == 10
