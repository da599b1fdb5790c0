"""Port of tensorflow/python/data/kernel_tests/enumerate_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("enumerate_test.py")
add = SUITE.add

# TF's (["a", "b"], [1, 2], [37.0, 38]) are string, int32 and float32 tensors.
COMPONENTS = (np.array([b"a", b"b"], dtype=object), np.array([1, 2], np.int32),
              np.array([37.0, 38.0], np.float32))
add("testEnumerate", lambda ns: ns.Dataset.from_tensor_slices(COMPONENTS)
    .enumerate(np.int64(20)))
add("testEnumerate[element_spec]", lambda ns: ns.spec(ns.Dataset.from_tensor_slices(COMPONENTS)
    .enumerate(np.int64(20))), mode="value")
add("testEnumerate[python_int_start]", lambda ns: ns.Dataset.from_tensor_slices(COMPONENTS)
    .enumerate(20))

SUITE.checkpoint("EnumerateCheckpointTest.test", lambda ns: ns.Dataset.range(2, 10).enumerate())
