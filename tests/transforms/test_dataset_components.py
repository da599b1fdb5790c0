"""Datasets as components of elements (what ``window`` yields), as tf.data 2.21 handles them.

Every expected value and error category below is what TensorFlow 2.21's tf.data gives for the
same pipeline (checked with ``benchmarks/.venvs/tf``); the TF expression is in each comment.
A batch of datasets is a NumPy object array of datasets (tf.data's ``DatasetSpec`` with a
batch shape), so ``unbatch`` gives the datasets back.
"""

import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing

D = fl.Dataset
INT64 = np.dtype("int64")


def contents(value):
    """A value with every dataset replaced by the list of its elements (as ints)."""
    if isinstance(value, fl.Dataset):
        return [contents(x) for x in value]
    if isinstance(value, np.ndarray) and value.dtype == object:
        return [contents(x) for x in value.tolist()]
    if isinstance(value, tuple):
        return tuple(contents(x) for x in value)
    if isinstance(value, dict):
        return {k: contents(v) for k, v in value.items()}
    if isinstance(value, list):
        return [contents(x) for x in value]
    return value if value is None else int(value)


def test_window_element_spec_is_a_dataset_spec():
    # tf: range(6).window(2).element_spec
    #   == DatasetSpec(TensorSpec(shape=(), dtype=tf.int64), TensorShape([]))
    assert D.range(6).window(2).element_spec == fl.DatasetSpec(fl.TensorSpec((), INT64), ())
    # tf: range(6).map(lambda x: (x, {"a": x})).window(2).element_spec: one per leaf
    scalar_windows = fl.DatasetSpec(fl.TensorSpec((), INT64), ())
    spec = D.range(6).map(lambda x: (x, {"a": x})).window(2).element_spec
    assert spec == (scalar_windows, {"a": scalar_windows})
    # tf: range(6).window(2).window(2).element_spec: a dataset of datasets
    assert D.range(6).window(2).window(2).element_spec == fl.DatasetSpec(scalar_windows, ())


def test_batch_of_windows_is_an_array_of_datasets():
    ds = D.range(6).window(2).batch(2)
    # tf: DatasetSpec(TensorSpec(shape=(), dtype=tf.int64), TensorShape([None]))
    assert ds.element_spec == fl.DatasetSpec(fl.TensorSpec((), INT64), (None,))
    batches = list(ds)
    assert [b.shape for b in batches] == [(2,), (1,)]
    assert all(b.dtype == object for b in batches)
    assert [contents(b) for b in batches] == [[[0, 1], [2, 3]], [[4, 5]]]
    # tf: ... batch(2, drop_remainder=True).element_spec: TensorShape([2])
    assert D.range(6).window(2).batch(2, drop_remainder=True).element_spec == \
        fl.DatasetSpec(fl.TensorSpec((), INT64), (2,))
    # tf: ... batch(2).batch(2).element_spec: TensorShape([None, None])
    assert D.range(6).window(2).batch(2).batch(2).element_spec == \
        fl.DatasetSpec(fl.TensorSpec((), INT64), (None, None))


def test_unbatch_of_batched_windows_gives_the_windows_back():
    # tf: range(6).window(2).batch(2).unbatch() -> the windows [0, 1], [2, 3], [4, 5]
    ds = D.range(6).window(2).batch(2).unbatch()
    assert ds.element_spec == fl.DatasetSpec(fl.TensorSpec((), INT64), ())
    assert [contents(w) for w in ds] == [[0, 1], [2, 3], [4, 5]]
    assert ds.cardinality() == fl.UNKNOWN  # tf: -2, the batch dimension is not static
    # tf: ... .unbatch().flat_map(lambda x: x) -> 0..5
    assert [int(x) for x in ds.flat_map(lambda x: x)] == [0, 1, 2, 3, 4, 5]
    # tf: ... batch(3).unbatch().batch(2).unbatch() -> the windows again
    again = D.range(6).window(2).batch(3).unbatch().batch(2).unbatch()
    assert [contents(w) for w in again] == [[0, 1], [2, 3], [4, 5]]
    # tf: ... batch(2).map(lambda x: x).unbatch() -> the windows
    mapped = D.range(6).window(2).batch(2).map(lambda x: x).unbatch()
    assert [contents(w) for w in mapped] == [[0, 1], [2, 3], [4, 5]]
    # tf: ... batch(2, drop_remainder=True).unbatch() -> [0, 1], [2, 3]
    dropped = D.range(6).window(2).batch(2, drop_remainder=True).unbatch()
    assert [contents(w) for w in dropped] == [[0, 1], [2, 3]]


def test_batches_of_windows_checkpoint():
    check_checkpointing(D.range(7).window(2).batch(2))
    check_checkpointing(D.range(7).window(3, shift=1).batch(2).unbatch())
    check_checkpointing(D.range(7).window(2).batch(2, num_parallel_calls=2))


def test_batching_batches_of_windows_of_different_sizes_is_an_invalid_argument():
    # tf: range(6).window(2).batch(2).batch(2) -> InvalidArgumentError "Cannot batch tensors
    # with different shapes in component 0. First element had shape [2] and element 1 had
    # shape [1]."
    with pytest.raises(fl.InvalidArgumentError, match=r"element 1 has shape \(1,\), but "
                                                      r"element 0 has shape \(2,\)"):
        list(D.range(6).window(2).batch(2).batch(2))


def test_unbatch_of_single_datasets_is_refused():
    # tf: range(6).window(2).unbatch() -> ValueError "Slicing dataset elements is not
    # supported for rank 0."
    with pytest.raises(ValueError, match="Slicing dataset elements is not supported for rank 0"):
        D.range(6).window(2).unbatch()
    # With the spec unknown until run (a generator of windows), at the first element.
    windows = D.from_generator(lambda: iter([D.range(2)]))
    with pytest.raises(fl.StructureError, match="Slicing dataset elements is not supported"):
        list(windows.unbatch())


def test_padded_batch_of_datasets_is_a_type_error():
    # tf: range(6).window(2).padded_batch(2) -> TypeError "`padded_batch` is not supported
    # for datasets of datasets"
    with pytest.raises(TypeError, match="`padded_batch` is not supported for datasets of "
                                        "datasets"):
        D.range(6).window(2).padded_batch(2)
    with pytest.raises(TypeError, match="`padded_batch` is not supported for datasets of "
                                        "datasets"):
        list(D.from_generator(lambda: iter([D.range(2)])).padded_batch(2))


def test_rebatch_of_batched_windows():
    # tf: range(6).window(2).batch(2).rebatch(1).element_spec: TensorShape([None])
    ds = D.range(6).window(2).batch(2).rebatch(1)
    assert ds.element_spec == fl.DatasetSpec(fl.TensorSpec((), INT64), (None,))
    assert [contents(b) for b in ds] == [[[0, 1]], [[2, 3]], [[4, 5]]]


def test_from_tensors_of_a_list_of_datasets_is_a_batch_of_them():
    ds = D.from_tensors([D.range(2), D.range(3)])
    # tf: DatasetSpec(TensorSpec(shape=(), dtype=tf.int64), TensorShape([2]))
    assert ds.element_spec == fl.DatasetSpec(fl.TensorSpec((), INT64), (2,))
    (element,) = list(ds)
    assert element.shape == (2,) and contents(element) == [[0, 1], [0, 1, 2]]
    # tf: from_tensors([range(2), range(3)]).unbatch() -> the two datasets
    assert [contents(d) for d in ds.unbatch()] == [[0, 1], [0, 1, 2]]
    # tf: from_tensors(range(3)) -> the dataset itself; flat_map(lambda x: x) -> 0, 1, 2
    one = D.from_tensors(D.range(3))
    assert one.element_spec == fl.DatasetSpec(fl.TensorSpec((), INT64), ())
    assert [int(x) for x in one.flat_map(lambda x: x)] == [0, 1, 2]
    # tf: from_tensors((range(2), range(3))).flat_map(lambda a, b: a.concatenate(b))
    pair = D.from_tensors((D.range(2), D.range(3)))
    assert [int(x) for x in pair.flat_map(lambda a, b: a.concatenate(b))] == [0, 1, 0, 1, 2]


def test_flat_map_of_a_batch_of_datasets_is_an_invalid_argument():
    # tf: from_tensors([range(2), range(3)]).flat_map(lambda x: x) and
    # range(6).window(2).batch(2).flat_map(lambda x: x) -> InvalidArgumentError "Function
    # must return a single scalar of dtype DT_VARIANT."
    for ds in (D.from_tensors([D.range(2), D.range(3)]), D.range(6).window(2).batch(2)):
        with pytest.raises(fl.InvalidArgumentError, match="must return a single dataset, got "
                                                          r"a batch of datasets of shape \(2,\)"):
            list(ds.flat_map(lambda x: x))


def test_from_tensor_slices_of_datasets():
    # tf: from_tensor_slices([range(2), range(3)]).element_spec is DatasetSpec(int64, [])
    ds = D.from_tensor_slices([D.range(2), D.range(3)])
    assert ds.element_spec == fl.DatasetSpec(fl.TensorSpec((), INT64), ())
    assert [contents(d) for d in ds] == [[0, 1], [0, 1, 2]]
    # tf: ... .flat_map(lambda x: x) -> [0, 1, 0, 1, 2]
    assert [int(x) for x in ds.flat_map(lambda x: x)] == [0, 1, 0, 1, 2]
    # tf: from_tensor_slices(([range(2), range(3)], [1, 2])) -> (dataset, 1), (dataset, 2)
    # (tf's 1 and 2 are int32; feedline's Python ints are int64)
    pairs = D.from_tensor_slices(([D.range(2), D.range(3)], [1, 2]))
    assert [contents(p) for p in pairs] == [([0, 1], 1), ([0, 1, 2], 2)]
    # tf: from_tensor_slices([[r1, r2], [r3, r4]]): DatasetSpec(int64, [2]); unbatch -> 4
    grid = D.from_tensor_slices([[D.range(1), D.range(2)], [D.range(3), D.range(4)]])
    assert grid.element_spec == fl.DatasetSpec(fl.TensorSpec((), INT64), (2,))
    assert [contents(d) for d in grid.unbatch()] == [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3]]
    # tf: from_tensor_slices({"d": [range(2), range(3)]}).element_spec
    assert D.from_tensor_slices({"d": [D.range(2), D.range(3)]}).element_spec == \
        {"d": fl.DatasetSpec(fl.TensorSpec((), INT64), ())}
    # Shapes of the datasets' elements relax, as tf's from_tensor_slices([range(2).batch(1),
    # range(2).batch(2)]).element_spec: DatasetSpec(TensorSpec(shape=(None,)), [])
    relaxed = D.from_tensor_slices([D.range(2).batch(1, drop_remainder=True),
                                    D.range(2).batch(2, drop_remainder=True)])
    assert relaxed.element_spec == fl.DatasetSpec(fl.TensorSpec((None,), INT64), ())


def test_from_tensor_slices_refuses_one_dataset_and_incompatible_datasets():
    # tf: from_tensor_slices(range(3)) -> ValueError "Slicing dataset elements is not
    # supported for rank 0."
    with pytest.raises(ValueError, match="Slicing dataset elements is not supported for rank 0"):
        D.from_tensor_slices(D.range(3))
    # tf: from_tensor_slices([range(2), from_tensors(1.0)]) -> ValueError (int64, float32)
    with pytest.raises(ValueError, match="dtype int64 in one spec and float32 in the other"):
        D.from_tensor_slices([D.range(2), D.from_tensors(1.0)])
    with pytest.raises(ValueError, match="dtype int64 in one spec and float32 in the other"):
        D.from_tensors([D.range(2), D.from_tensors(1.0)])
    with pytest.raises(fl.StructureError, match=r"item \[1\] is a value of type int"):
        D.from_tensor_slices([D.range(2), 3])


def test_datasets_survive_shuffle_and_prefetch():
    # tf: range(6).window(2).shuffle(1).flat_map(lambda x: x) -> 0..5
    ds = D.range(6).window(2).shuffle(1).prefetch(2).flat_map(lambda x: x)
    assert [int(x) for x in ds] == [0, 1, 2, 3, 4, 5]


def test_flat_map_over_datasets_checkpoints():
    # Datasets other than window()'s cannot be stored in a state: flat_map keeps the input's
    # position before the element instead, and reads it again on restore.
    out = check_checkpointing(D.from_tensor_slices([D.range(2), D.range(3)])
                              .flat_map(lambda x: x))
    assert [int(x) for x in out] == [0, 1, 0, 1, 2]
    pair = D.from_tensors((D.range(2), D.range(3).map(lambda x: x * 10)))
    out = check_checkpointing(pair.repeat(2).flat_map(lambda a, b: a.concatenate(b)))
    assert [int(x) for x in out] == [0, 1, 0, 10, 20] * 2
    check_checkpointing(D.range(7).window(3).flat_map(lambda w: w))  # windows are stored
