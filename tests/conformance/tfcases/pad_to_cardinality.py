"""Port of tensorflow/python/data/experimental/kernel_tests/pad_to_cardinality_test.py."""

from __future__ import annotations

from typing import Any

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("pad_to_cardinality_test.py")
add = SUITE.add


def pad_to_cardinality(ns: Any, dataset: Any, n: int) -> Any:
    """TF's ``apply(tf.data.experimental.pad_to_cardinality(n))``; feedline's method."""
    if ns.name == "tensorflow":
        return dataset.apply(ns.tf_module.data.experimental.pad_to_cardinality(n))
    return dataset.pad_to_cardinality(n)


DATA = np.array([1, 2, 3, 4, 5], np.int32)
add("testBasic", lambda ns: pad_to_cardinality(
    ns, ns.Dataset.from_tensor_slices({"a": DATA}), 12))
add("testNoPadding", lambda ns: pad_to_cardinality(
    ns, ns.Dataset.from_tensor_slices({"a": DATA}), 5))
add("testStructuredData", lambda ns: pad_to_cardinality(ns, ns.Dataset.from_tensor_slices({
    "a": DATA, "b": (np.array([b"a", b"b", b"c", b"d", b"e"], dtype=object),
                     np.array([-1, -2, -3, -4, -5], np.int32))}), 12))
add("testUnknownCardinality", lambda ns: pad_to_cardinality(
    ns, ns.Dataset.from_tensors({"a": np.int32(1)}).filter(lambda x: True), 5))
add("testInfiniteCardinality", lambda ns: pad_to_cardinality(
    ns, ns.Dataset.from_tensors({"a": np.int32(1)}).repeat(), 5))
add("testNonMapping", lambda ns: pad_to_cardinality(ns, ns.Dataset.from_tensors(np.int32(1)),
                                                    5))
add("testRequestedCardinalityTooShort", lambda ns: pad_to_cardinality(
    ns, ns.Dataset.from_tensors({"a": np.int32(1)}).repeat(5), 3))
