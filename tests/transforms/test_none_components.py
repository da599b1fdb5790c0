"""``None`` components of elements (tf.data's ``NoneTensorSpec``), as tf.data 2.21 keeps them.

Every expected value and error category below is what TensorFlow 2.21's tf.data gives for the
same pipeline (checked with ``benchmarks/.venvs/tf``); Python ints are int32 in both.
"""

import numpy as np
import pytest

import feedline as fl
from feedline.testing import assert_elements_equal, check_checkpointing

D = fl.Dataset
INT64 = np.dtype("int64")
INT32 = np.dtype("int32")


def test_batch_keeps_none():
    # tf: from_tensors((1, None)).repeat(3).batch(2)
    #   -> [(array([1, 1]), None), (array([1]), None)]
    ds = D.from_tensors((1, None)).repeat(3).batch(2)
    assert_elements_equal(list(ds), [(np.array([1, 1], INT32), None),
                                     (np.array([1], INT32), None)])
    # tf: (TensorSpec(shape=(None,), dtype=tf.int32), NoneTensorSpec())
    assert ds.element_spec == (fl.TensorSpec((None,), INT32), fl.NoneTensorSpec())
    parallel = D.from_tensors((1, None)).repeat(3).batch(2, num_parallel_calls=2)
    assert_elements_equal(list(parallel), list(ds))


def test_unbatch_keeps_none():
    # tf: from_tensors(([1, 2], None)).unbatch() -> [(1, None), (2, None)]
    ds = D.from_tensors(([1, 2], None)).unbatch()
    assert_elements_equal(list(ds), [(np.int32(1), None), (np.int32(2), None)])
    # tf: (TensorSpec(shape=(), dtype=tf.int32), NoneTensorSpec())
    assert ds.element_spec == (fl.TensorSpec((), INT32), fl.NoneTensorSpec())
    assert ds.cardinality() == 2  # the None component has no batch dimension to consult


def test_functions_may_return_none_components():
    # tf: range(3).map(lambda x: {"x": None, "y": x})
    ds = D.range(3).map(lambda x: {"x": None, "y": x})
    assert_elements_equal(list(ds), [{"x": None, "y": np.int64(i)} for i in range(3)])
    assert ds.element_spec == {"x": fl.NoneTensorSpec(), "y": fl.TensorSpec((), INT64)}
    # tf: range(4).map(lambda x: (x, None)).batch(3).unbatch() -> (0, None) ... (3, None)
    again = D.range(4).map(lambda x: (x, None)).batch(3).unbatch()
    assert_elements_equal(list(again), [(np.int64(i), None) for i in range(4)])
    with pytest.raises(TypeError, match=r"returned None \(NoneType\), which cannot"):
        list(D.range(3).map(lambda x: None))  # tf: an error too (no component at all)


def test_from_tensor_slices_keeps_none():
    # tf: from_tensor_slices(([1, 2], None)) -> [(1, None), (2, None)]
    ds = D.from_tensor_slices(([1, 2], None))
    assert_elements_equal(list(ds), [(np.int32(1), None), (np.int32(2), None)])
    assert ds.element_spec == (fl.TensorSpec((), INT32), fl.NoneTensorSpec())
    assert_elements_equal(ds[1], (np.int32(2), None))
    assert_elements_equal(ds.batch(2)[0], (np.array([1, 2], INT32), None))
    with pytest.raises(fl.StructureError, match="at least one leaf that is not None"):
        D.from_tensor_slices((None,))


def test_rebatch_keeps_none():
    # tf: from_tensors(([1, 2], None)).rebatch(1) -> [(array([1]), None), (array([2]), None)]
    ds = D.from_tensors(([1, 2], None)).rebatch(1)
    assert_elements_equal(list(ds), [(np.array([1], INT32), None),
                                     (np.array([2], INT32), None)])
    # tf: (TensorSpec(shape=(1,), dtype=tf.int32), NoneTensorSpec())
    assert ds.element_spec == (fl.TensorSpec((1,), INT32), fl.NoneTensorSpec())
    joined = D.from_tensors(([1, 2], None)).repeat(2).rebatch([3, 0])
    assert_elements_equal(list(joined), [(np.array([1, 2, 1], INT32), None),
                                         (np.array([], dtype=np.int32), None),
                                         (np.array([2], INT32), None)])


def test_padded_batch_of_none_is_a_type_error():
    # tf: from_tensors((1, None)).repeat(3).padded_batch(2) -> TypeError "`padded_batch` is
    # only supported for datasets that produce tensor elements but type spec of elements in
    # the input dataset is not a subclass of TensorSpec: `NoneTensorSpec()`."
    message = "type spec of elements in the input dataset is not a subclass of TensorSpec"
    with pytest.raises(TypeError, match=message):
        D.from_tensors((1, None)).repeat(3).padded_batch(2)
    with pytest.raises(TypeError, match=message):
        list(D.range(3).map(lambda x: (x, None)).padded_batch(2))


def test_mixing_none_and_values_in_one_component_cannot_batch():
    ds = D.range(2).map(lambda x: (x, None) if x == 0 else (x, x)).batch(2)
    with pytest.raises(fl.InvalidArgumentError, match=r"leaf \[1\] of batch element 1 is "
                                                      r"int64, but element 0 has None there"):
        list(ds)
    ds = D.range(2).map(lambda x: (x, None) if x == 1 else (x, x)).batch(2)
    with pytest.raises(fl.InvalidArgumentError, match=r"leaf \[1\] of batch element 1 is "
                                                      r"NoneType, but element 0 has int64 there"):
        list(ds)


def test_none_components_checkpoint():
    check_checkpointing(D.from_tensors(([1, 2, 3], None)).repeat(2).unbatch())
    check_checkpointing(D.from_tensors((1, None)).repeat(5).batch(2))
    check_checkpointing(D.from_tensors(([1, 2, 3], None)).repeat(2).rebatch(2))
    check_checkpointing(D.range(5).map(lambda x: {"x": None, "y": x}).prefetch(2))
