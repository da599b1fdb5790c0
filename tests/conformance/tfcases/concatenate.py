"""Port of tensorflow/python/data/kernel_tests/concatenate_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("concatenate_test.py")
add = SUITE.add


def _tile(rows, n):
    return np.tile(np.array([[r] for r in rows]), n)


def _concat(ns, a, b):
    return ns.Dataset.from_tensor_slices(a).concatenate(ns.Dataset.from_tensor_slices(b))


SAME = ((_tile([1, 2, 3, 4], 20), _tile([12, 13, 14, 15], 15), np.array([37.0, 38.0, 39.0, 40.0])),
        (_tile([1, 2, 3, 4, 5], 20), _tile([12, 13, 14, 15, 16], 15),
         np.array([37.0, 38.0, 39.0, 40.0, 41.0])))
SHAPE = ((_tile([1, 2, 3, 4], 20), _tile([12, 13, 14, 15], 4)),
         (_tile([1, 2, 3, 4, 5], 20), _tile([12, 13, 14, 15, 16], 15)))
add("testConcatenateDataset", lambda ns: _concat(ns, *SAME))
add("testConcatenateDataset[element_spec]", lambda ns: ns.spec(_concat(ns, *SAME)), mode="value")
add("testConcatenateDatasetDifferentShape", lambda ns: _concat(ns, *SHAPE))
add("testConcatenateDatasetDifferentShape[element_spec]",
    lambda ns: ns.spec(_concat(ns, *SHAPE)), mode="value")
add("testConcatenateDatasetDifferentStructure", lambda ns: _concat(
    ns, (_tile([1, 2, 3, 4], 5), _tile([12, 13, 14, 15], 4)), SAME[1]))
add("testConcatenateDatasetDifferentKeys", lambda ns: _concat(
    ns, {"foo": _tile([1, 2, 3, 4], 1), "bar": _tile([12, 13, 14, 15], 1)},
    {"foo": _tile([1, 2, 3, 4], 1), "baz": _tile([5, 6, 7, 8], 1)}))
add("testConcatenateDatasetDifferentType", lambda ns: _concat(
    ns, (_tile([1, 2, 3, 4], 5), _tile([12, 13, 14, 15], 4)),
    (np.tile(np.array([[1.0], [2.0], [3.0], [4.0]]), 5), _tile([12, 13, 14, 15], 15))))

SUITE.checkpoint("ConcatenateCheckpointTest.testConcatenateCore", lambda ns: _concat(
    ns, (_tile([1, 2, 3, 4], 20), _tile([12, 13, 14, 15], 4)),
    (_tile([5, 6, 7, 8, 9], 20), _tile([16, 17, 18, 19, 20], 15))))
