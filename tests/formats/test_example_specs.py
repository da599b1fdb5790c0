"""element_spec of datasets of parsed Examples: ragged (VarLenFeature by default) and sparse.

tf.data's spec of ``parse_example`` with a ``VarLenFeature`` is a ``SparseTensorSpec``; feedline
parses it into ragged rows by default (``var_len_as_sparse=True`` gives TensorFlow's sparse
form), and either way ``element_spec`` describes it (it raised NumPy's "inhomogeneous shape"
error for ragged rows).
"""

import numpy as np
import pytest

import feedline as fl
from feedline.core.structure import batched_spec, most_specific_common_spec, unbatched_spec
from feedline.formats.example import (
    FixedLenFeature,
    RaggedFeature,
    VarLenFeature,
    encode_example,
    parse_example,
    parse_single_example,
)

FEATURES = {"id": FixedLenFeature([], "int64"), "tokens": VarLenFeature("int64")}
RECORDS = [encode_example({"id": i, "tokens": list(range(i))}) for i in range(5)]


def parsed(**kwargs):
    return (fl.Dataset.from_tensor_slices(RECORDS).batch(2)
            .map(lambda batch: parse_example(batch, FEATURES, **kwargs)))


def test_var_len_rows_are_ragged_and_have_a_spec():
    ds = parsed()
    assert ds.element_spec == {
        "id": fl.TensorSpec((2,), np.dtype(np.int64)),
        "tokens": fl.RaggedTensorSpec((2, None), np.dtype(np.int64), 1)}
    first = next(iter(ds))
    assert first["tokens"].to_list() == [[], [0]]
    assert ds.element_spec["tokens"].is_compatible_with(first["tokens"])


def test_var_len_as_sparse_has_tensorflows_sparse_spec():
    ds = parsed(var_len_as_sparse=True)
    spec = ds.element_spec["tokens"]
    # TF 2.21: SparseTensorSpec(TensorShape([None, None]), tf.int64); feedline reads the
    # first batch, whose dense shape is [2, 1].
    assert spec == fl.SparseTensorSpec((2, 1), np.dtype(np.int64))
    assert repr(spec) == "SparseTensorSpec(shape=(2, 1), dtype=int64)"
    batches = list(ds)
    assert [b["tokens"].shape for b in batches] == [(2, 1), (2, 3), (1, 4)]
    common = None
    for batch in batches:
        common = most_specific_common_spec(common, fl.core.structure.spec_of(batch))
    assert common["tokens"] == fl.SparseTensorSpec((None, None), np.dtype(np.int64))


def test_single_example_var_len_gives_arrays_or_sparse_values():
    single = fl.Dataset.from_tensor_slices(RECORDS).map(
        lambda r: parse_single_example(r, FEATURES))
    assert single.element_spec["tokens"] == fl.TensorSpec((0,), np.dtype(np.int64))
    sparse = fl.Dataset.from_tensor_slices(RECORDS).map(
        lambda r: parse_single_example(r, FEATURES, var_len_as_sparse=True))
    assert sparse.element_spec["tokens"] == fl.SparseTensorSpec((0,), np.dtype(np.int64))


def test_ragged_feature_with_partitions_has_its_ragged_rank():
    records = [encode_example({"w": [7, 8, 9], "lens": [2, 1]}),
               encode_example({"w": [6], "lens": [0, 1]})]
    spec = {"w": RaggedFeature("int64", partitions=[RaggedFeature.RowLengths("lens")])}
    ds = fl.Dataset.from_tensors(records).map(lambda b: parse_example(b, spec))
    assert ds.element_spec == {"w": fl.RaggedTensorSpec((2, None, None), np.dtype(np.int64), 2)}


def test_ragged_and_sparse_specs_batch_and_unbatch_as_tf_data():
    ragged = fl.RaggedTensorSpec((2, None), np.dtype(np.int64), 1)
    assert batched_spec(ragged, None) == fl.RaggedTensorSpec(
        (None, 2, None), np.dtype(np.int64), 2)
    # A ragged level of one unbatches into arrays of varying length.
    assert unbatched_spec(ragged) == fl.TensorSpec((None,), np.dtype(np.int64))
    assert unbatched_spec(batched_spec(ragged, 3)) == ragged
    sparse = fl.SparseTensorSpec((2, 5), np.dtype(np.float32))
    assert batched_spec(sparse, 4) == fl.SparseTensorSpec((4, 2, 5), np.dtype(np.float32))
    assert unbatched_spec(sparse) == fl.SparseTensorSpec((5,), np.dtype(np.float32))


def test_unbatched_parsed_rows_have_a_spec():
    ds = parsed().unbatch()
    assert ds.element_spec == {"id": fl.TensorSpec((), np.dtype(np.int64)),
                               "tokens": fl.TensorSpec((None,), np.dtype(np.int64))}
    assert [e["tokens"].tolist() for e in ds] == [[], [0], [0, 1], [0, 1, 2], [0, 1, 2, 3]]


def test_specs_of_different_kinds_or_dtypes_do_not_combine():
    ragged = fl.RaggedTensorSpec((2, None), np.dtype(np.int64), 1)
    with pytest.raises(fl.StructureError, match="cannot combine"):
        ragged.most_specific_common(fl.RaggedTensorSpec((2, None, None), np.dtype(np.int64), 2))
    with pytest.raises(fl.StructureError, match="different dtypes"):
        ragged.most_specific_common(fl.RaggedTensorSpec((2, None), np.dtype(np.float32), 1))
    with pytest.raises(fl.StructureError):
        most_specific_common_spec(ragged, fl.TensorSpec((2, 3), np.dtype(np.int64)))
    assert not ragged.is_compatible_with(np.zeros((2, 3), np.int64))
    assert not fl.SparseTensorSpec((2,), np.dtype(np.int64)).is_compatible_with(
        fl.RaggedValues(np.array([1]), [0, 1, 1]))
