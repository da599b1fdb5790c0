import numpy as np
import pytest

import feedline as fl


@pytest.mark.parametrize("skip", [0, 5, 10])
def test_the_single_element(skip):
    # TF's testBasic: range(100).skip(skip).map(x * x).take(1).
    ds = fl.Dataset.range(100).skip(skip).map(lambda x: (x * x, np.array([x]))).take(1)
    dense, vector = ds.get_single_element()
    assert int(dense) == skip * skip and vector.tolist() == [skip]


def test_empty_and_longer_datasets_are_tf_datas_errors():
    with pytest.raises(fl.InvalidArgumentError, match=r"^get_single_element: Dataset was "
                                                      r"empty\.$"):
        fl.Dataset.range(100).skip(100).get_single_element()
    with pytest.raises(fl.InvalidArgumentError, match=r"Dataset had more than one element\."):
        fl.Dataset.range(100).get_single_element(name="first")


def test_reads_at_most_two_elements():
    seen = []
    ds = fl.Dataset.range(10**9).map(lambda x: seen.append(int(x)) or x)
    with pytest.raises(fl.InvalidArgumentError):
        ds.get_single_element()
    assert seen[:2] == [0, 1] and len(seen) < 1000  # not the whole (endless) input


def test_window_batches_inside_flat_map():
    # TF's testWindow.
    ds = fl.Dataset.range(10).window(2).flat_map(
        lambda w: fl.Dataset.from_tensors(w.batch(2).get_single_element()))
    assert [b.tolist() for b in ds] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
