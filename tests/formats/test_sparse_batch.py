"""Sparse values (tf.SparseTensor) batch and unbatch as in tf.data: values recorded with
TensorFlow 2.21 (parse_single_example of VarLenFeature, then batch(2) and unbatch())."""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing

FEATURES = {"v": fl.VarLenFeature("int64")}


def _parsed() -> fl.Dataset:
    records = np.array([fl.encode_example({"v": v}) for v in ([1, 2, 3], [4], [])],
                       dtype=object)
    return fl.Dataset.from_tensor_slices(records).map(
        lambda r: fl.parse_single_example(r, FEATURES, var_len_as_sparse=True))


def _triples(ds: fl.Dataset) -> list:
    return [(e["v"].indices.tolist(), e["v"].values.tolist(), e["v"].dense_shape.tolist())
            for e in ds]


def test_sparse_values_of_different_lengths_batch_into_one():
    assert _triples(_parsed().batch(2)) == [
        ([[0, 0], [0, 1], [0, 2], [1, 0]], [1, 2, 3, 4], [2, 3]),
        ([], [], [1, 0])]


def test_unbatch_gives_rows_in_the_batchs_shape():
    ds = _parsed().batch(2).unbatch()
    assert _triples(ds) == [([[0], [1], [2]], [1, 2, 3], [3]), ([[0]], [4], [3]),
                            ([], [], [0])]
    check_checkpointing(ds, epochs=1)


def test_sparse_values_of_different_ranks_do_not_batch():
    one = fl.SparseValues([[0]], np.array([1]), [2])
    two = fl.SparseValues([[0, 0]], np.array([1]), [2, 2])
    with pytest.raises(fl.StructureError, match="cannot batch leaf .* rank 2 .*element 1"):
        list(fl.Dataset.from_tensors(one).concatenate(fl.Dataset.from_tensors(two)).batch(2))
