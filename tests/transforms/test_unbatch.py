import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.testing import assert_elements_equal, check_checkpointing, fail_at


def ints(ds):
    return [int(x) for x in ds]


def test_unbatch_inverts_batch_with_remainder():
    assert ints(fl.Dataset.range(7).batch(3).unbatch()) == list(range(7))


def test_unbatch_nested_and_bytes_leaves():
    ds = fl.Dataset.from_tensors({"a": np.arange(6).reshape(3, 2), "b": [b"x", b"y", b"z"]})
    out = list(ds.unbatch())
    expected = [{"a": np.array([0, 1]), "b": b"x"}, {"a": np.array([2, 3]), "b": b"y"},
                {"a": np.array([4, 5]), "b": b"z"}]
    assert_elements_equal(out, expected)


def test_unbatch_skips_empty_batches():
    ds = fl.Dataset.from_tensor_slices([3, 0, 2]).map(lambda n: np.arange(n))
    assert ints(ds.unbatch()) == [0, 1, 2, 0, 1]


def test_unbatch_of_empty_dataset():
    assert list(fl.Dataset.range(0).batch(2).unbatch()) == []


def test_unbatch_scalar_leaf_is_rejected_statically_and_at_run_time():
    with pytest.raises(ValueError, match="scalar"):
        fl.Dataset.range(3).unbatch()
    ds = fl.Dataset.range(3).map(lambda x: (np.arange(2), x))
    with pytest.raises(fl.StructureError, match=r"leaf \[1\] of input element 0 is a scalar"):
        list(ds.unbatch())


def test_unbatch_leaves_with_different_batch_sizes():
    ds = fl.Dataset.from_tensors((np.arange(3), np.arange(2)))
    with pytest.raises(fl.StructureError, match=r"\[0\] has 3 rows, \[1\] has 2"):
        list(ds.unbatch())


def test_unbatch_cardinality_and_spec():
    ds = fl.Dataset.range(10).batch(5, drop_remainder=True).unbatch()
    assert ds.cardinality() == 10
    assert fl.Dataset.range(10).batch(4).unbatch().cardinality() == fl.UNKNOWN
    assert fl.Dataset.from_tensor_slices(np.zeros((4, 3, 2))).unbatch().cardinality() == 12
    assert ds.element_spec == fl.TensorSpec((), np.dtype(np.int64))


def test_unbatch_checkpointing():
    check_checkpointing(fl.Dataset.range(7).batch(3).unbatch())
    check_checkpointing(fl.Dataset.from_tensors(([1, 2], [b"a", b"b"])).repeat(2).unbatch())


def test_checkpointing_restores_failing_elements_in_place():
    check_checkpointing(fail_at(fl.Dataset.range(10).batch(3), [1]).unbatch())


def test_unbatch_random_access_with_a_static_batch_size():
    # tf.data reads element i of range(10).batch(4, drop_remainder=True).unbatch(), and
    # OutOfRange past the end (TF's UnbatchRandomAccessTest).
    from feedline.core.random_access import at, supports_random_access

    ds = fl.Dataset.range(10).batch(4, drop_remainder=True).unbatch()
    assert supports_random_access(ds) and len(ds) == 8
    assert [int(at(ds, i)) for i in range(8)] == list(range(8))
    for index in (-1, 8, 100):
        with pytest.raises(fl.OutOfRangeError):
            at(ds, index)
    rows = fl.Dataset.from_tensor_slices(
        {"a": np.arange(12).reshape(4, 3), "b": np.arange(24.0).reshape(4, 3, 2)}).unbatch()
    assert_elements_equal([rows[i] for i in range(len(rows))], list(rows))
    with_none = fl.Dataset.from_tensor_slices((np.arange(6).reshape(2, 3), None)).unbatch()
    assert_elements_equal([with_none[i] for i in range(6)], list(with_none))
    shuffled = ds.global_shuffle(seed=3)
    assert sorted(int(x) for x in shuffled) == list(range(8))


def test_unbatch_without_a_static_batch_size_has_no_random_access():
    from feedline.core.random_access import at, supports_random_access

    ds = fl.Dataset.range(10).batch(4).unbatch()  # the last batch is smaller: not static
    assert not supports_random_access(ds)
    with pytest.raises(TypeError, match="batch size is not known statically"):
        at(ds, 0)


def test_unbatch_reader_refuses_a_batch_of_another_size():
    from feedline.core.random_access import open_reader
    from feedline.transforms.unbatch import UnbatchReader

    reader = UnbatchReader(open_reader(fl.Dataset.range(10).batch(3)), 4, "unbatch")
    with pytest.raises(fl.StructureError, match="input element 0 has 3 rows"):
        reader.get(0)


def test_unbatch_of_datasets_checkpoints_by_reading_the_batch_again():
    # tf.data's testUnbatchNestedDataset, checkpointed: a state cannot store the datasets, so
    # unbatch keeps the input's position before their batch and the next row.
    ds = fl.Dataset.from_tensors([fl.Dataset.range(3) for _ in range(4)]).unbatch()
    assert ints(check_checkpointing(ds.flat_map(lambda x: x))) == list(range(3)) * 4
    made = fl.Dataset.range(7).map(lambda x: fl.Dataset.from_tensors(x)).batch(3).unbatch()
    restored = check_checkpointing(made)
    assert [int(next(iter(d))) for d in restored] == list(range(7))


def test_unbatch_of_datasets_refuses_a_checkpoint_naming_the_stage():
    # The input (a shuffle buffer of batches of datasets, read from a deterministic=False
    # map, so not by position) cannot give its position either: iterating works, a
    # checkpoint while rows are held is a CheckpointError naming unbatch.
    ds = (fl.Dataset.range(6).map(lambda x: fl.Dataset.from_tensors(x), num_parallel_calls=2,
                                  deterministic=False).batch(2)
          .shuffle(3, seed=0).unbatch(name="rows"))
    it = ds._make_iterator(IteratorContext())
    for _ in range(3):  # into the second batch (the buffer holds datasets then)
        next(it)
    with pytest.raises(fl.CheckpointError, match=r"rows: cannot checkpoint while rows of "
                                                 r"input element 1 are held"):
        it.state_dict()
    assert len(list(it)) == 3
    it.close()
