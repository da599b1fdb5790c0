import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing


def test_dense_to_sparse_batch_as_tf_datas_test():
    # TF's testDenseToSparseBatchDataset: fill([x], x), sparse_batch(4, [12]).
    components = np.random.default_rng(0).integers(12, size=(100,)).astype(np.int32)
    ds = fl.Dataset.from_tensor_slices(components).map(lambda x: np.full(x, x)).sparse_batch(
        4, [12])
    batches = list(ds)
    assert len(batches) == 25
    for start, result in zip(range(0, 100, 4), batches):
        part = components[start:start + 4]
        assert result.indices.tolist() == [[i, j] for i, c in enumerate(part) for j in range(c)]
        assert result.values.tolist() == [c for c in part for _ in range(c)]
        assert result.dense_shape.tolist() == [min(4, 100 - start), 12]


def test_unknown_dimensions_take_the_largest_in_the_batch():
    # TF's testDenseToSparseBatchDatasetWithUnknownShape: fill([x, x], x), row_shape [5, None].
    components = np.random.default_rng(1).integers(5, size=(40,)).astype(np.int32)
    ds = fl.Dataset.from_tensor_slices(components).map(lambda x: np.full((x, x), x))
    for start, result in zip(range(0, 40, 4), ds.sparse_batch(4, [5, None])):
        part = components[start:start + 4]
        assert result.indices.tolist() == [[i, j, z] for i, c in enumerate(part)
                                           for j in range(c) for z in range(c)]
        assert result.values.tolist() == [c for c in part for _ in range(c) for _ in range(c)]
        assert result.dense_shape.tolist() == [min(4, 40 - start), 5, int(np.max(part))]


def test_values_checked_against_tensorflow():
    # tf.data 2.21: range(3).map(fill([x], x)).sparse_batch(2, [3]) and of scalars.
    first, second = list(fl.Dataset.range(3).map(lambda x: np.full(x, x)).sparse_batch(2, [3]))
    assert (first.indices.tolist(), first.values.tolist(), first.dense_shape.tolist()) == (
        [[1, 0]], [1], [2, 3])
    assert (second.indices.tolist(), second.values.tolist(), second.dense_shape.tolist()) == (
        [[0, 0], [0, 1]], [2, 2], [1, 3])
    scalars = list(fl.Dataset.range(3).sparse_batch(2, []))
    assert [(s.indices.tolist(), s.values.tolist(), s.dense_shape.tolist())
            for s in scalars] == [([[0], [1]], [0, 1], [2]), ([[0]], [2], [1])]


def test_tf_datas_errors():
    with pytest.raises(ValueError, match="Dimension -2 must be >= 0"):
        fl.Dataset.from_tensors(np.array([[1]])).sparse_batch(4, [-2])
    with pytest.raises(ValueError, match="batch_size"):
        fl.Dataset.range(3).sparse_batch(0, [3])
    wrong_rank = fl.Dataset.range(3).map(lambda x: np.full(x, x)).sparse_batch(2, [3, 3])
    with pytest.raises(fl.InvalidArgumentError, match=r"Input element had shape \(\[0\]\) that "
                                                      r"is incompatible with the row shape "
                                                      r"\(\[3,3\]\)"):
        list(wrong_rank)
    too_big = fl.Dataset.range(5).map(lambda x: np.full(x, x)).sparse_batch(2, [3])
    with pytest.raises(fl.DataLossError, match=r"Input element had shape \(\[4\]\) that is "
                                               r"larger than the row shape \(\[3\]\)"):
        list(too_big)


def test_cardinality_unbatch_and_checkpointing():
    ds = fl.Dataset.range(7).map(lambda x: np.arange(x % 3)).sparse_batch(3, [None])
    assert ds.cardinality() == 3
    rows = [(r.values.tolist(), r.dense_shape.tolist()) for r in ds.unbatch()]
    assert rows == [([], [2]), ([0], [2]), ([0, 1], [2])] * 2 + [([], [0])]
    check_checkpointing(ds)


def test_element_spec_as_tf_data():
    # tf 2.21 (sparse_batch_op.py): SparseTensorSpec(TensorShape([None]).concatenate(
    # row_shape), the input's dtype): the batch dimension is None, row_shape's None stays None.
    ds = fl.Dataset.range(5).map(lambda x: np.arange(x))
    assert ds.sparse_batch(2, [5]).element_spec == fl.SparseTensorSpec((None, 5),
                                                                        np.dtype(np.int64))
    assert ds.sparse_batch(2, [None]).batch(1).element_spec == fl.SparseTensorSpec(
        (None, None, None), np.dtype(np.int64))
    slices = fl.Dataset.from_tensor_slices(np.zeros((4, 2, 3), np.float32))
    assert slices.sparse_batch(3, [4, None]).element_spec == fl.SparseTensorSpec(
        (None, 4, None), np.dtype(np.float32))
