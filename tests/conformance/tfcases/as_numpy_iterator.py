"""Port of tensorflow/python/data/kernel_tests/as_numpy_iterator_test.py."""

from __future__ import annotations

import collections

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("as_numpy_iterator_test.py")
add = SUITE.add

Point = collections.namedtuple("Point", ["x", "y"])


def _i32(*v):
    return np.array(v, np.int32)


add("testBasic", lambda ns: list(ns.Dataset.range(3).as_numpy_iterator()), mode="value")
add("testNestedStructure", lambda ns: list(ns.Dataset.from_tensor_slices({
    "a": (_i32(1, 2), _i32(3, 4)), "b": _i32(5, 6), "c": Point(_i32(7, 8), _i32(9, 10))})
    .as_numpy_iterator()), mode="value")

SUITE.skip("testNonEager", "graph mode")
for name in ("testDatasetElement", "testNestedNonTensorElement"):
    SUITE.skip(name, "datasets as tensor elements (TF variant tensors), which TF's "
               "as_numpy_iterator refuses; feedline's is its plain iterator")
for name in ("testSparseElement", "testRaggedElement"):
    SUITE.skip(name, "SparseTensor / RaggedTensor: feedline has neither")
