"""Element comparison lives in core (windows compare by it, below the testing helpers);
``feedline.testing.elements`` still offers it."""

from __future__ import annotations

import numpy as np

import feedline as fl
from feedline.core import structure
from feedline.testing import elements


def test_the_testing_helpers_offer_the_core_comparison():
    assert elements.elements_equal is structure.elements_equal


def test_elements_compare_by_structure_dtype_shape_and_value_nans_equal():
    nan = np.array([1.0, np.nan])
    assert structure.elements_equal((nan, b"x"), (nan.copy(), b"x"))
    assert not structure.elements_equal(np.int64(1), np.int32(1))
    assert not structure.elements_equal((np.arange(2),), (np.arange(3),))
    assert not structure.elements_equal({"a": 1}, (1,))


def test_windows_compare_by_value():
    first, second = fl.Dataset.range(4).window(2)
    again, _ = fl.Dataset.range(4).window(2)

    assert first == again and first != second
