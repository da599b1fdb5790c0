"""bucket_by_sequence_length against what tf.data 2.21 returned
(tests/data/tfdata_golden/bucket_by_sequence_length.json, recorded by record.py: inputs from
from_generator with an output_signature, the same arguments as CASES here)."""

import sys
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing, fail_at

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data" / "tfdata_golden"))
import golden  # noqa: E402

GOLDEN = golden.load("bucket_by_sequence_length")

CASES = {
    "docstring": dict(element_length_func=len, bucket_boundaries=[3, 5],
                      bucket_batch_sizes=[2, 2, 2]),
    "three_buckets": dict(element_length_func=len, bucket_boundaries=[2, 4, 6],
                          bucket_batch_sizes=[3, 2, 2, 1]),
    "pad_to_bucket_boundary": dict(element_length_func=len, bucket_boundaries=[3, 5, 8],
                                   bucket_batch_sizes=[2, 2, 3, 1], pad_to_bucket_boundary=True),
    "drop_remainder": dict(element_length_func=len, bucket_boundaries=[3, 5],
                           bucket_batch_sizes=[2, 2, 2], drop_remainder=True),
    "padded_shapes_and_values": dict(element_length_func=len, bucket_boundaries=[4],
                                     bucket_batch_sizes=[3, 2], padded_shapes=[8],
                                     padding_values=np.int64(-1)),
    "tuple_elements": dict(element_length_func=lambda s, label: len(s), bucket_boundaries=[3, 5],
                           bucket_batch_sizes=[2, 3, 2],
                           padding_values=(np.int64(-7), np.int64(0))),
    "tuple_pad_to_boundary": dict(element_length_func=lambda s, label: len(s),
                                  bucket_boundaries=[3, 6], bucket_batch_sizes=[2, 2, 2],
                                  pad_to_bucket_boundary=True),
    "frames_pad_to_boundary": dict(element_length_func=len, bucket_boundaries=[3, 7],
                                   bucket_batch_sizes=[2, 2, 2], pad_to_bucket_boundary=True),
    "no_padding": dict(element_length_func=lambda d: d["len"], bucket_boundaries=[4],
                       bucket_batch_sizes=[2, 2], no_padding=True),
    "bytes": dict(element_length_func=len, bucket_boundaries=[2], bucket_batch_sizes=[2, 2],
                  padding_values=b"<pad>"),
}


def source(name, signature=True):
    """The case's input as TensorFlow read it: from_generator with its output_signature."""
    elements = [golden.decode(e) for e in GOLDEN[name]["input"]]
    spec = golden.spec(GOLDEN[name]["signature"]) if signature else None
    return fl.Dataset.from_generator(lambda: iter(elements), output_signature=spec)


def test_every_golden_case_is_tested():
    assert sorted(CASES) == sorted(GOLDEN)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_tensorflow(name):
    dataset = source(name).bucket_by_sequence_length(**CASES[name])
    golden.same(list(dataset), [golden.decode(e) for e in GOLDEN[name]["output"]])
    assert dataset.cardinality() == fl.UNKNOWN


@pytest.mark.parametrize("name", ["docstring", "pad_to_bucket_boundary", "tuple_pad_to_boundary"])
def test_unknown_input_spec_pads_every_dimension_as_unknown(name):
    # After a map feedline does not know the spec: vectors pad as tf.data's [None] shapes do.
    dataset = source(name).map(lambda *x: x[0] if len(x) == 1 else x)
    out = list(dataset.bucket_by_sequence_length(**CASES[name]))
    golden.same(out, [golden.decode(e) for e in GOLDEN[name]["output"]])


def test_fixed_feature_dimension_needs_padded_shapes_without_a_spec():
    frames = source("frames_pad_to_boundary").map(lambda x: x)
    expected = [golden.decode(e) for e in GOLDEN["frames_pad_to_boundary"]["output"]]
    # Every dimension counts as unknown after a map: the 2 features pad to the boundary too.
    guessed = list(frames.bucket_by_sequence_length(**CASES["frames_pad_to_boundary"]))
    assert guessed[0].shape == (2, 2, 2) and guessed[1].shape == (2, 6, 6)
    exact = frames.bucket_by_sequence_length(**CASES["frames_pad_to_boundary"],
                                             padded_shapes=[None, 2])
    golden.same(list(exact), expected)


@pytest.mark.parametrize("name", ["three_buckets", "pad_to_bucket_boundary", "tuple_elements",
                                  "no_padding", "bytes"])
def test_checkpointing(name):
    check_checkpointing(source(name).bucket_by_sequence_length(**CASES[name]))


def test_element_spec():
    ds = source("tuple_elements").bucket_by_sequence_length(**CASES["tuple_elements"])
    assert ds.element_spec == (fl.TensorSpec((None, None), np.int64),
                               fl.TensorSpec((None,), np.int64))
    padded = source("docstring").bucket_by_sequence_length(len, [3], [2, 2], padded_shapes=[9])
    assert padded.element_spec == fl.TensorSpec((None, 9), np.int64)


def test_argument_errors():
    ds = fl.Dataset.range(3).map(lambda n: np.arange(n))
    with pytest.raises(ValueError, match=r"len\(bucket_batch_sizes\) must equal "
                       r"len\(bucket_boundaries\) \+ 1"):
        ds.bucket_by_sequence_length(len, [3, 5], [2, 2])
    with pytest.raises(ValueError, match="must be a positive int, got 0"):
        ds.bucket_by_sequence_length(len, [3], [2, 0])
    with pytest.raises(TypeError, match="callable element_length_func"):
        ds.bucket_by_sequence_length(None, [3], [2, 2])
    with pytest.raises(ValueError, match="padded shape"):
        source("docstring").bucket_by_sequence_length(len, [3], [2, 2], padded_shapes=[2, 2])


def test_too_long_for_the_boundary_fails_its_element():
    ds = fl.Dataset.from_tensor_slices([1, 9, 2]).map(lambda n: np.ones(n, np.int64))
    it = iter(ds.bucket_by_sequence_length(len, [4], [2, 2], pad_to_bucket_boundary=True))
    with pytest.raises(ValueError, match=r"length 9: when pad_to_bucket_boundary=True, "
                       r"elements must have length < max\(bucket_boundaries\) \(4\)") as info:
        next(it)
    assert "at input element 1" in "\n".join(info.value.__notes__)
    assert [b.tolist() for b in it] == [[[1, 0, 0], [1, 1, 0]]]


def test_failed_input_elements_are_dropped_and_checkpoint():
    ds = fail_at(fl.Dataset.range(1, 12), [2, 6]).map(lambda n: np.arange(n))
    check_checkpointing(ds.bucket_by_sequence_length(len, [4, 8], [2, 2, 3]))


def test_no_padding_needs_one_shape():
    ds = fl.Dataset.from_tensor_slices([1, 2]).map(lambda n: np.ones(n))
    with pytest.raises(fl.StructureError, match="cannot batch"):
        list(ds.bucket_by_sequence_length(len, [5], [2, 2], no_padding=True))


def test_worker_shards_bucket_their_own_elements():
    from feedline.distribute.autoshard import plan_sharding, shard_pipeline

    ds = fl.Dataset.range(1, 21).map(lambda n: np.full(n, n)).bucket_by_sequence_length(
        len, [5, 10], [2, 2, 2])
    assert plan_sharding(ds, 2).policy == "data"
    rows = sorted(int(row.max()) for i in range(2) for batch in shard_pipeline(ds, 2, i)
                  for row in batch)
    assert rows == list(range(1, 21))
