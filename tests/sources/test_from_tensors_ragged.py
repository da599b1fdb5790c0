"""``from_tensors`` of ragged values (issue 43), as tf.data's of a ``tf.RaggedTensor``.

TF 2.21: ``tf.data.Dataset.from_tensors(tf.ragged.constant([[0], [1, 2]]))`` has one
element, the ragged tensor whole, with ``element_spec`` ``RaggedTensorSpec(TensorShape([2,
None]), tf.int32, 1, tf.int64)``; ``unbatch`` gives its rows ``[0]`` and ``[1, 2]``
(``from_tensors_test.py``'s ``testFromTensorsRagged`` checks that a tuple of ragged
tensors comes back whole). Before the fix ``from_tensors`` raised NumPy's
"inhomogeneous shape" ValueError.
"""

from __future__ import annotations

import numpy as np

import feedline as fl


def ragged(dtype=np.int32):
    return fl.RaggedValues.from_row_lengths(np.arange(3, dtype=dtype), [1, 2])


def test_from_tensors_of_ragged_values_yields_them_whole():
    ds = fl.Dataset.from_tensors(ragged())
    assert ds.element_spec == fl.RaggedTensorSpec((2, None), np.int32, ragged_rank=1)
    assert ds.cardinality() == 1
    [element] = list(ds)
    assert isinstance(element, fl.RaggedValues)
    assert element.to_list() == [[0], [1, 2]]
    assert element.dtype == np.int32
    assert [row.tolist() for row in ds.unbatch()] == [[0], [1, 2]]


def test_ragged_values_in_a_structure_stay_ragged():
    ds = fl.Dataset.from_tensors({"tokens": ragged(np.int64), "label": 1})
    assert ds.element_spec == {
        "tokens": fl.RaggedTensorSpec((2, None), np.int64, ragged_rank=1),
        "label": fl.TensorSpec((), np.int32)}
    [element] = list(ds)
    assert element["tokens"].to_list() == [[0], [1, 2]]
    assert element["label"] == np.int32(1)


def test_an_in_place_update_never_reaches_the_next_epoch():
    def double(r):
        r.values *= 2
        return r

    ds = fl.Dataset.from_tensors(ragged()).repeat(2).map(double)
    assert [r.to_list() for r in ds] == [[[0], [2, 4]], [[0], [2, 4]]]


def test_from_tensor_slices_of_ragged_values_still_gives_rows():
    ds = fl.Dataset.from_tensor_slices(ragged())
    assert ds.element_spec == fl.TensorSpec((None,), np.int32)
    assert [row.tolist() for row in ds] == [[0], [1, 2]]
