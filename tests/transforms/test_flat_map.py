import json

import numpy as np
import pytest

import feedline as fl
from feedline.core.constants import UNKNOWN
from feedline.core.iterator import IteratorContext
from feedline.testing import check_checkpointing, fail_at, feedline_threads, no_leaked_threads


def ints(ds):
    return [int(x) for x in ds]


def test_tf_docs_example():
    ds = fl.Dataset.from_tensor_slices(np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]]))
    assert ints(ds.flat_map(fl.Dataset.from_tensor_slices)) == list(range(1, 10))


def test_concatenates_in_order_and_skips_empty_inner_datasets():
    ds = fl.Dataset.from_tensor_slices([2, 0, 3, 0]).flat_map(lambda n: fl.Dataset.range(n))
    assert ints(ds) == [0, 1, 0, 1, 2]


def test_tuple_elements_are_unpacked():
    ds = fl.Dataset.from_tensor_slices(([1, 5], [3, 7])).flat_map(
        lambda a, b: fl.Dataset.range(a, b))
    assert ints(ds) == [1, 2, 5, 6]


def test_non_dataset_result_is_a_type_error_naming_the_index():
    ds = fl.Dataset.range(3).flat_map(lambda x: [x] if x == 1 else fl.Dataset.range(1))
    with pytest.raises(TypeError, match=r"must return a feedline Dataset, got list for input "
                                        r"element 1"):
        list(ds)


def test_map_func_error_is_annotated_and_the_element_skipped():
    def make(x):
        if x == 1:
            raise KeyError("no such file")
        return fl.Dataset.from_tensors(x)

    ds = fl.Dataset.range(3).flat_map(make, name="open")
    with pytest.raises(KeyError) as info:
        list(ds)
    assert any("open" in n and "input element 1" in n for n in info.value.__notes__)
    it = ds._make_iterator(IteratorContext())
    assert int(next(it)) == 0
    with pytest.raises(KeyError):
        next(it)
    assert int(next(it)) == 2
    with pytest.raises(StopIteration):
        next(it)
    it.close()


def test_inner_dataset_error_propagates_with_a_note_and_reading_continues():
    def check(x):
        if x == 11:
            raise ValueError("corrupt record")
        return x

    ds = fl.Dataset.range(2).flat_map(lambda x: fl.Dataset.range(10 * x, 10 * x + 3).map(check))
    it = ds._make_iterator(IteratorContext())
    assert ints([next(it) for _ in range(4)]) == [0, 1, 2, 10]
    with pytest.raises(ValueError) as info:
        next(it)
    assert any("made from input element 1" in n for n in info.value.__notes__)
    assert int(next(it)) == 12
    it.close()


def test_cardinality():
    assert fl.Dataset.range(3).flat_map(fl.Dataset.range).cardinality() == UNKNOWN
    assert fl.Dataset.range(0).flat_map(fl.Dataset.range).cardinality() == 0
    with pytest.raises(TypeError, match="callable"):
        fl.Dataset.range(3).flat_map(None)


def test_inner_threads_end_when_inner_dataset_ends_and_on_close():
    ds = fl.Dataset.range(3).flat_map(lambda x: fl.Dataset.range(5).prefetch(2))
    with no_leaked_threads():
        it = iter(ds)
        assert ints([next(it) for _ in range(7)]) == [0, 1, 2, 3, 4, 0, 1]
        assert len(feedline_threads()) <= 1  # the first inner dataset's thread has ended
        it.close()


def test_flat_map_checkpointing():
    ds = fl.Dataset.range(5).flat_map(lambda x: fl.Dataset.range(x).map(lambda y: y + 10 * x))
    ref = check_checkpointing(ds)
    assert ints(ref) == [10, 20, 21, 30, 31, 32, 40, 41, 42, 43]


def test_flat_map_checkpointing_with_threads_and_bytes_elements():
    words = fl.Dataset.from_tensor_slices([b"ab", b"", b"cde"])
    ds = words.flat_map(lambda w: fl.Dataset.from_tensor_slices(np.frombuffer(w, np.uint8))
                        if w else fl.Dataset.range(0)).prefetch(2)
    assert ints(check_checkpointing(ds)) == list(b"abcde")


def test_window_style_nested_flat_map_checkpointing():
    ds = fl.Dataset.range(3).flat_map(
        lambda x: fl.Dataset.range(x + 1).flat_map(lambda y: fl.Dataset.from_tensors(y * 10)))
    assert ints(check_checkpointing(ds)) == [0, 0, 10, 0, 10, 20]


def test_checkpointing_restores_failing_elements_in_place():
    # failures of the input and of the inner datasets
    ds = fail_at(fl.Dataset.range(5), [1]).flat_map(lambda x: fail_at(fl.Dataset.range(x), [1]))
    check_checkpointing(ds)


def _datasets_as_elements():
    return fl.Dataset.range(10).map(lambda x: fl.Dataset.from_tensors(x))


@pytest.mark.parametrize("build", [
    lambda ds: ds.batch(3).unbatch(),
    lambda ds: ds.batch(3).unbatch().batch(2).unbatch(),
    lambda ds: ds.batch(5).map(lambda b: b).unbatch(),
    lambda ds: ds.prefetch(2),
    lambda ds: ds.batch(3).unbatch().prefetch(2),
    lambda ds: ds.batch(3).unbatch().map(lambda d: d, num_parallel_calls=2),
], ids=["unbatch", "unbatch_twice", "map_between", "prefetch", "unbatch_prefetch",
        "parallel_map"])
def test_datasets_as_elements_iterate_without_a_checkpoint(build):
    # Issue 43's regression: flat_map asked its input for a state before every element, and
    # an input holding datasets (unbatch's rows, a prefetch buffer) cannot give one: plain
    # iteration stopped after the first element with a CheckpointError.
    ds = build(_datasets_as_elements()).flat_map(lambda d: d)
    assert ints(ds) == list(range(10))


def test_datasets_as_elements_checkpoint_through_unbatch():
    ds = _datasets_as_elements().batch(3).unbatch().batch(2).unbatch().flat_map(lambda d: d)
    assert ints(check_checkpointing(ds)) == list(range(10))


def test_a_checkpoint_that_cannot_be_taken_names_flat_map():
    # A shuffle buffer of datasets from an input that cannot be read again the same way
    # (deterministic=False) cannot be stored: iterating works; a checkpoint taken while an
    # element's dataset is read says which stage and element, and why.
    unordered = fl.Dataset.range(10).map(lambda x: fl.Dataset.from_tensors(x),
                                         num_parallel_calls=2, deterministic=False)
    ds = unordered.shuffle(4, seed=1).flat_map(
        lambda d: d.repeat(2), name="flatten")
    it = ds._make_iterator(IteratorContext())
    for _ in range(3):  # into the second element's dataset (the buffer holds datasets then)
        next(it)
    with pytest.raises(fl.CheckpointError, match=r"flatten: cannot checkpoint while reading "
                                                 r"the dataset made from input element 1"):
        it.state_dict()
    assert len(list(it)) == 17
    it.close()


def test_a_shuffle_buffer_of_datasets_checkpoints_by_position_under_flat_map():
    # Read again from its input, a buffer of datasets needs no encoding: the checkpoint
    # taken inside the second element's dataset restores the exact rest.
    ds = _datasets_as_elements().shuffle(4, seed=1, reshuffle_each_iteration=False).flat_map(
        lambda d: d.repeat(2))
    expected = [int(x) for x in ds]
    it = iter(ds)
    taken = [int(next(it)) for _ in range(3)]
    state = json.loads(json.dumps(it.state_dict()))
    restored = iter(ds)
    restored.load_state_dict(state)
    assert taken + [int(x) for x in restored] == expected
    it.close()
    restored.close()
