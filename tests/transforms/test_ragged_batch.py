"""ragged_batch against what tf.data 2.21 returned (tests/data/tfdata_golden/ragged_batch.json,
recorded by record.py from from_generator inputs with an output_signature)."""

import sys
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline.core.structure import flatten, spec_of
from feedline.testing import check_checkpointing, fail_at

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "tfdata_golden"))
import golden  # noqa: E402

GOLDEN = golden.load("ragged_batch")


def source(name, signature=True):
    """The case's input as TensorFlow read it: from_generator with its output_signature (the
    ragged-elements case has none: feedline has no spec for ragged leaves)."""
    elements = [golden.decode(e) for e in GOLDEN[name]["input"]]
    spec = golden.spec(GOLDEN[name]["signature"])
    if spec == "ragged":  # a generator's elements are arrays: ragged ones come from a map
        return fl.Dataset.range(len(elements)).map(lambda i: elements[i])
    return fl.Dataset.from_generator(lambda: iter(elements),
                                     output_signature=spec if signature else None)


def batched(name, dataset):
    return dataset.ragged_batch(GOLDEN[name]["batch_size"], GOLDEN[name]["drop_remainder"])


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_matches_tensorflow(name):
    out = list(batched(name, source(name)))
    golden.same(out, [golden.decode(e) for e in GOLDEN[name]["output"]])


@pytest.mark.parametrize("name", ["vectors", "vectors_drop_remainder", "scalars", "dict",
                                  "two_ragged_dims", "ragged_elements"])
def test_unknown_spec_matches_where_every_dimension_is_unknown(name):
    # Without a spec (after a map), scalars stack and arrays are ragged in every dimension:
    # tf.data's result whenever the traced shape is all None, as for these cases.
    out = list(batched(name, source(name, signature=False).map(lambda *x: x[0] if len(x) == 1
                                                                   else x)))
    golden.same(out, [golden.decode(e) for e in GOLDEN[name]["output"]])


def test_unknown_spec_makes_fixed_dimensions_ragged_too():
    out = list(source("inner_dense_dim", signature=False).ragged_batch(3))
    assert out[0].ragged_rank == 2 and out[0].values.ndim == 1
    expected = golden.decode(GOLDEN["inner_dense_dim"]["output"][0])
    assert out[0].to_list() == expected.to_list()


def test_cardinality_and_spec():
    ds = fl.Dataset.range(10).map(lambda x: np.arange(x))
    assert ds.ragged_batch(4).cardinality() == 3
    assert ds.ragged_batch(4, drop_remainder=True).cardinality() == 2


@pytest.mark.parametrize("name", ["vectors", "two_ragged_dims", "tuple_mixed", "ragged_elements"])
def test_checkpointing(name):
    check_checkpointing(batched(name, source(name)))


def test_results_hold_in_checkpointed_buffers():
    ds = fl.Dataset.range(12).map(lambda x: np.arange(x % 5)).ragged_batch(3).shuffle(3, seed=1)
    check_checkpointing(ds)


def test_failures_keep_their_place():
    check_checkpointing(fail_at(fl.Dataset.range(9), [4]).map(lambda x: np.arange(x))
                        .ragged_batch(2))


def test_mismatches_name_the_batch():
    ds = fl.Dataset.from_generator(lambda: iter([np.zeros(2), np.zeros((2, 2))])).ragged_batch(2)
    with pytest.raises(fl.StructureError, match=r"leaf <element> of batch element 1 has rank 2, "
                       "but element 0's has rank 1") as info:
        next(iter(ds))
    assert "ragged_batch" in "\n".join(info.value.__notes__)
    rows = [fl.RaggedValues([1, 2], [0, 2]), np.array([3])]
    mixed = fl.Dataset.range(2).map(lambda i: rows[i]).ragged_batch(2)
    with pytest.raises(ValueError, match=r"leaf <element>: row 1 is ndarray, but row 0 has "
                       "ragged rank 1") as info:
        next(iter(mixed))
    assert "feedline: raised in ragged_batch at input element 0" in info.value.__notes__
    with pytest.raises(ValueError, match="must be a positive int"):
        fl.Dataset.range(3).ragged_batch(0)


def test_worker_shards_build_whole_batches():
    from feedline.distribute.autoshard import plan_sharding, shard_pipeline

    ds = fl.Dataset.range(20).map(lambda x: np.arange(x % 4)).ragged_batch(3)
    assert plan_sharding(ds, 2).policy == "batch"
    shards = [list(shard_pipeline(ds, 2, i)) for i in range(2)]
    merged = [shards[k % 2][k // 2] for k in range(len(shards[0]) + len(shards[1]))]
    golden.same(merged, list(ds))


def test_a_map_giving_one_shape_batches_densely_as_tf_data():
    # tf.data traces the map (shape (3,)) and stacks: a dense (2, 3) batch, not ragged rows.
    out = list(fl.Dataset.range(5).map(lambda x: (x, np.full(3, x, np.float32)))
               .ragged_batch(2))
    assert all(isinstance(b[1], np.ndarray) for b in out)
    assert [b[1].shape for b in out] == [(2, 3), (2, 3), (1, 3)]
    assert out[1][1].tolist() == [[2.0] * 3, [3.0] * 3]
    assert out[0][1].dtype == np.float32


def test_a_leaf_is_ragged_from_the_first_batch_whose_shapes_differ():
    ds = fl.Dataset.range(8).map(lambda x: np.arange(x // 4)).ragged_batch(2)
    out = list(ds)
    assert [type(b).__name__ for b in out] == ["ndarray", "ndarray", "RaggedValues",
                                               "RaggedValues"]
    assert [b.tolist() if isinstance(b, np.ndarray) else b.to_list() for b in out] == [
        [[], []], [[], []], [[0], [0]], [[0], [0]]]
    assert [b.to_list() for b in fl.Dataset.range(4).map(lambda x: np.arange(x))
            .ragged_batch(2)] == [[[], [0]], [[0, 1], [0, 1, 2]]]
    check_checkpointing(ds)


def test_unbatch_gives_the_rows_of_a_ragged_batch_back():
    # tf.data: unbatch of a RaggedTensor batch gives its rows; feedline raised.
    rows = [np.arange(n) for n in (0, 3, 1, 2)]
    ds = fl.Dataset.range(4).map(lambda i: (i, rows[i])).ragged_batch(3).unbatch()
    out = list(ds)
    assert [int(i) for i, _ in out] == [0, 1, 2, 3]
    assert [r.tolist() for _, r in out] == [r.tolist() for r in rows]
    check_checkpointing(ds)
    nested = fl.Dataset.range(4).map(lambda i: rows[i]).ragged_batch(2).ragged_batch(2)
    assert [b.to_list() for b in nested.unbatch()] == [[[], [0, 1, 2]], [[0], [0, 1]]]
    assert [r.tolist() for r in nested.unbatch().unbatch()] == [r.tolist() for r in rows]


# tf.data 2.21's spec (ragged_batch_op.py: _DenseToRaggedDataset.to_ragged_spec makes a leaf
# of unknown dimensions RaggedTensorSpec(ragged_rank=its last unknown axis), then batch()
# prepends the batch dimension: None unless drop_remainder, one more ragged level).
RAGGED_SPECS = {
    "vectors": fl.RaggedTensorSpec((None, None), np.dtype(np.int64), 1),
    "vectors_drop_remainder": fl.RaggedTensorSpec((4, None), np.dtype(np.int64), 1),
    "scalars": fl.TensorSpec((None,), np.dtype(np.float32)),
    "fixed_shape": fl.TensorSpec((None, 3), np.dtype(np.int32)),
    "inner_dense_dim": fl.RaggedTensorSpec((None, None, 3), np.dtype(np.float32), 1),
    "ragged_inner_only": fl.RaggedTensorSpec((None, 2, None), np.dtype(np.int64), 2),
    "two_ragged_dims": fl.RaggedTensorSpec((None, None, None), np.dtype(np.int64), 2),
    "dict": {"ids": fl.RaggedTensorSpec((None, None), np.dtype(np.int64), 1),
             "label": fl.TensorSpec((None,), np.dtype(np.int64))},
    "tuple_mixed": (fl.TensorSpec((None,), np.dtype(np.int64)),
                    fl.RaggedTensorSpec((None, None), np.dtype(np.float32), 1),
                    fl.TensorSpec((None, 2), np.dtype(np.int64)),
                    fl.RaggedTensorSpec((None, None), np.dtype(object), 1)),
}


@pytest.mark.parametrize("name", sorted(RAGGED_SPECS))
def test_element_spec_is_tf_data_s_and_fits_every_batch(name):
    ds = batched(name, source(name))
    assert ds.element_spec == RAGGED_SPECS[name]
    for batch in ds:
        for spec, found in zip(flatten(ds.element_spec), flatten(spec_of(batch))):
            # A RaggedValues does not know that a ragged level is uniform (the 2 of
            # ragged_inner_only): its own spec has None there.
            assert (type(found), found.dtype, getattr(found, "ragged_rank", 0)) == \
                (type(spec), spec.dtype, getattr(spec, "ragged_rank", 0))
            assert len(found.shape) == len(spec.shape)
            assert all(None in (a, b) or a == b for a, b in zip(spec.shape, found.shape))


def test_element_spec_without_an_input_spec_is_the_first_batch_s_with_no_batch_size():
    ds = fl.Dataset.range(5).map(lambda x: np.zeros(x, np.float32))
    assert ds.ragged_batch(2).element_spec == fl.RaggedTensorSpec((None, None),
                                                                  np.dtype(np.float32), 1)
    assert ds.ragged_batch(2, drop_remainder=True).element_spec == fl.RaggedTensorSpec(
        (2, None), np.dtype(np.float32), 1)
    dense = fl.Dataset.range(5).map(lambda x: np.zeros(3, np.float32)).ragged_batch(2)
    assert dense.element_spec == fl.TensorSpec((None, 3), np.dtype(np.float32))
    assert fl.Dataset.range(0).map(lambda x: x).ragged_batch(2).element_spec is None
