import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing

DATA = np.array([1, 2, 3, 4, 5], np.int32)


def test_pads_with_zeros_and_a_false_mask():
    # TF's testBasic / testStructuredData.
    ds = fl.Dataset.from_tensor_slices({"a": DATA, "b": (np.array(list(b"abcde"), np.uint8),
                                                         ["v", "w", "x", "y", "z"])})
    out = list(ds.pad_to_cardinality(7))
    assert [int(e["a"]) for e in out] == [1, 2, 3, 4, 5, 0, 0]
    assert [bool(e["valid"]) for e in out] == [True] * 5 + [False] * 2
    assert [e["b"][1] for e in out] == [b"v", b"w", b"x", b"y", b"z", b"", b""]
    assert out[-1]["a"].dtype == np.int32 and out[-1]["b"][0].dtype == np.uint8
    assert ds.pad_to_cardinality(7).cardinality() == 7


def test_no_padding_and_another_mask_key():
    out = list(fl.Dataset.from_tensor_slices({"a": DATA}).pad_to_cardinality(5, "real"))
    assert [bool(e["real"]) for e in out] == [True] * 5


def test_array_leaves_pad_with_zero_arrays():
    ds = fl.Dataset.from_tensor_slices({"v": np.ones((2, 3), np.float32)})
    last = list(ds.pad_to_cardinality(3))[-1]
    assert last["v"].tolist() == [0.0, 0.0, 0.0] and not last["valid"]


@pytest.mark.parametrize("dataset, target, message", [
    (fl.Dataset.from_tensors({"a": np.int32(1)}).filter(lambda x: True), 5,
     "must have a known cardinalty, but has cardinality -2"),
    (fl.Dataset.from_tensors({"a": np.int32(1)}).repeat(), 5,
     "must have a known cardinalty, but has cardinality -1"),
    (fl.Dataset.from_tensors(np.int32(1)), 5,
     "`pad_to_cardinality` requires its input dataset to be a dictionary"),
    (fl.Dataset.from_tensors({"a": np.int32(1)}).repeat(5), 3,
     r"less than the target cardinality \(3\), but has cardinality 5"),
    (fl.Dataset.from_tensor_slices({"b": np.arange(3)}).batch(2), 3,
     "no fully known shape"),
])
def test_tf_datas_value_errors(dataset, target, message):
    with pytest.raises(ValueError, match=message):
        dataset.pad_to_cardinality(target)


def test_checkpointing():
    ds = fl.Dataset.from_tensor_slices({"a": DATA}).pad_to_cardinality(9)
    assert len(check_checkpointing(ds)) == 9
