"""Exact comparison of nested elements (:func:`elements_equal` lives in
:mod:`feedline.core.structure`, where windows compare by it too)."""

from __future__ import annotations

from typing import Any

import numpy as np  # noqa: F401 - the doctests' namespace

from feedline.core.structure import elements_equal

__all__ = ["assert_elements_equal", "elements_equal"]


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
