"""Elements are values, as tf.data's immutable tensors: a function that updates its input in
place changes no other element, epoch or iterator."""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl


def _double_in_place(features):
    features["x"] *= 2
    features["seen"] = True  # a new key in the element's dict
    return features


@pytest.mark.parametrize("parallel", [None, 2])
def test_a_memory_cache_hands_out_what_it_read_every_epoch(parallel):
    ds = (fl.Dataset.from_tensor_slices({"x": np.arange(3.0).reshape(3, 1)}).cache()
          .repeat(3).map(_double_in_place, num_parallel_calls=parallel))
    assert [float(e["x"][0]) for e in ds] == [0.0, 2.0, 4.0] * 3
    assert all(e["seen"] for e in ds)


def test_a_memory_cache_keeps_its_own_copy_of_the_first_epoch():
    cached = fl.Dataset.from_tensor_slices({"x": np.ones((4, 2))}).cache()
    first = [e["x"] for e in cached.map(_double_in_place, num_parallel_calls=2)]
    assert all(x.tolist() == [2.0, 2.0] for x in first)
    assert [e["x"].tolist() for e in cached] == [[1.0, 1.0]] * 4


def test_from_tensors_under_repeat_gives_the_same_value_each_time():
    source = np.ones((2, 2))
    ds = fl.Dataset.from_tensors(source).repeat(3).map(lambda a: a.__imul__(2))
    assert [a.tolist() for a in ds] == [[[2.0, 2.0], [2.0, 2.0]]] * 3
    assert source.tolist() == [[1.0, 1.0], [1.0, 1.0]]  # the user's array is untouched


def test_rows_of_from_tensor_slices_are_not_views_of_the_source():
    source = np.ones((3, 2))
    ds = fl.Dataset.from_tensor_slices(source)
    changed = ds.repeat(2).map(lambda row: row.__imul__(5))
    assert [r.tolist() for r in changed] == [[5.0, 5.0]] * 6
    assert [r.tolist() for r in ds] == [[1.0, 1.0]] * 3
    assert source.tolist() == [[1.0, 1.0]] * 3
    # By index too (global_shuffle reads rows by index).
    row = ds[1]
    row *= 7
    assert ds[1].tolist() == [1.0, 1.0]
