"""Dataset.range: tf.data's semantics (Python range rules, int64 scalars)."""

import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing


def values(ds):
    out = list(ds)
    assert all(isinstance(x, np.int64) for x in out)
    return [int(x) for x in out]


@pytest.mark.parametrize("args, expected", [
    ((5,), [0, 1, 2, 3, 4]),
    ((2, 5), [2, 3, 4]),
    ((1, 8, 3), [1, 4, 7]),
    ((5, 1, -1), [5, 4, 3, 2]),
    ((5, -6, -4), [5, 1, -3]),
    ((-3, 0), [-3, -2, -1]),
])
def test_values_and_cardinality(args, expected):
    ds = fl.Dataset.range(*args)
    assert values(ds) == expected
    assert ds.cardinality() == len(expected) == len(ds)
    check_checkpointing(ds)


@pytest.mark.parametrize("args", [(0,), (-4,), (5, 2), (2, 5, -1), (3, 3)])
def test_empty_ranges(args):
    ds = fl.Dataset.range(*args)
    assert values(ds) == []
    assert ds.cardinality() == 0
    check_checkpointing(ds)


def test_step_zero_is_an_error():
    with pytest.raises(ValueError, match="must not be zero"):
        fl.Dataset.range(0, 5, 0)


@pytest.mark.parametrize("args", [(), (1, 2, 3, 4)])
def test_wrong_number_of_arguments(args):
    with pytest.raises(TypeError, match="1 to 3"):
        fl.Dataset.range(*args)


@pytest.mark.parametrize("bad", [1.5, "3", None, True])
def test_non_integer_arguments(bad):
    with pytest.raises(TypeError, match=r"range\(stop\) must be an integer"):
        fl.Dataset.range(bad)
    with pytest.raises(TypeError, match=r"range\(step\) must be an integer"):
        fl.Dataset.range(0, 3, bad)


def test_numpy_integer_arguments_and_dtype():
    ds = fl.Dataset.range(np.int32(1), np.int64(4), dtype=np.int32)
    out = list(ds)
    assert [int(x) for x in out] == [1, 2, 3]
    assert all(x.dtype == np.int32 for x in out)
    assert ds.element_spec == fl.TensorSpec((), np.dtype(np.int32))


def test_element_spec_is_int64_scalar():
    assert fl.Dataset.range(3).element_spec == fl.TensorSpec((), np.dtype(np.int64))


def test_large_values_do_not_overflow_in_cardinality():
    ds = fl.Dataset.range(2**62, 2**62 + 3)
    assert values(ds) == [2**62, 2**62 + 1, 2**62 + 2]
    assert ds.cardinality() == 3


def test_restore_across_epochs_and_after_end():
    check_checkpointing(fl.Dataset.range(10, 0, -3), epochs=3)
    ds = fl.Dataset.range(2)
    it = iter(ds)
    assert values(it) == [0, 1]
    state = it.state_dict()
    again = iter(ds)
    again.load_state_dict(state)
    assert list(again) == []


def test_range_state_keeps_one_size():
    check_checkpointing(fl.Dataset.range(0, 200, 7), constant_state_size=True, max_state_bytes=2048)


def _named_sources(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"")
    pattern = str(tmp_path / "*.txt")
    return {
        "range": lambda name=None: fl.Dataset.range(5, name=name),
        "from_tensor_slices": lambda name=None: fl.Dataset.from_tensor_slices([1, 2],
                                                                              name=name),
        "from_tensors": lambda name=None: fl.Dataset.from_tensors(42, name=name),
        "random": lambda name=None: fl.Dataset.random(seed=1, name=name).take(3),
        "counter": lambda name=None: fl.Dataset.counter(name=name).take(3),
        "zip": lambda name=None: fl.Dataset.zip(fl.Dataset.range(2), fl.Dataset.range(2),
                                                name=name),
        "list_files": lambda name=None: fl.Dataset.list_files(pattern, shuffle=False,
                                                              name=name),
        "list_files_shuffled": lambda name=None: fl.Dataset.list_files(pattern, seed=1,
                                                                       name=name),
    }


@pytest.mark.parametrize("source", ["range", "from_tensor_slices", "from_tensors", "random",
                                    "counter", "zip", "list_files", "list_files_shuffled"])
def test_every_source_takes_a_name_that_changes_nothing_but_its_label(tmp_path, source):
    # tf.data's sources all accept name=; it labels the stage in errors and profiles and is
    # no part of the fingerprint, so states move between named and unnamed pipelines.
    from feedline.core.fingerprint import PipelineFingerprint
    from feedline.core.random_access import describe_stage

    make = _named_sources(tmp_path)[source]
    named, plain = make("my_source"), make()
    node = named
    while node._inputs and getattr(node, "name", None) != "my_source":
        node = node._inputs[0]
    assert describe_stage(node) == "my_source"
    assert [repr(x) for x in named] == [repr(x) for x in plain]
    assert PipelineFingerprint.of(named).digest == PipelineFingerprint.of(plain).digest
