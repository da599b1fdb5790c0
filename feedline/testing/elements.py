"""Exact comparison of nested elements."""

from __future__ import annotations

from typing import Any

import numpy as np

from feedline.core.structure import flatten, is_registered_leaf, same_structure


def elements_equal(a: Any, b: Any) -> bool:
    """Whether two elements have the same structure, leaf dtypes kinds, shapes and values.

    NaNs compare equal to NaNs.

    Example:
        >>> elements_equal((np.arange(3), b"x"), (np.arange(3), b"x"))
        True
    """
    if not same_structure(a, b):
        return False
    for x, y in zip(flatten(a), flatten(b)):
        if is_registered_leaf(x) or is_registered_leaf(y):  # RaggedValues: its own equality
            if type(x) is not type(y) or x != y:
                return False
            continue
        if isinstance(x, bytes | str) or isinstance(y, bytes | str):
            if x != y:
                return False
            continue
        x_array, y_array = np.asarray(x), np.asarray(y)
        if x_array.shape != y_array.shape:
            return False
        if x_array.dtype == object or y_array.dtype == object:
            if x_array.tolist() != y_array.tolist():
                return False
        elif x_array.dtype != y_array.dtype or not np.array_equal(x_array, y_array,
                                                                   equal_nan=x_array.dtype.kind == "f"):
            return False
    return True


def assert_elements_equal(actual: list[Any], expected: list[Any], context: str = "") -> None:
    """Assert two lists of elements are equal element by element, naming the first difference.

    Example:
        >>> assert_elements_equal([np.int64(1)], [np.int64(1)])
    """
    where = f" ({context})" if context else ""
    for i, (x, y) in enumerate(zip(actual, expected)):
        if not elements_equal(x, y):
            raise AssertionError(f"element {i} differs{where}: got {x!r}, expected {y!r}")
    if len(actual) != len(expected):
        raise AssertionError(
            f"got {len(actual)} elements, expected {len(expected)}{where}")
