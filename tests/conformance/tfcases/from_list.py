"""Port of tensorflow/python/data/experimental/kernel_tests/from_list_test.py."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("from_list_test.py")
add = SUITE.add


def from_list(ns: Any, elements: Any) -> Any:
    """TF's ``tf.data.experimental.from_list``; feedline's ``Dataset.from_list``."""
    if ns.name == "tensorflow":
        return ns.tf_module.data.experimental.from_list(elements)
    return ns.Dataset.from_list(elements)


def i32(value: Any) -> Any:
    return np.asarray(value, np.int32)


add("testInvalidInputs[empty_input]", lambda ns: from_list(ns, []), mode="value")
add("testInvalidInputs[non-list_input]", lambda ns: from_list(ns, (1, 2, 3)), mode="value")
add("testLargeNInputs", lambda ns: from_list(ns, [i32(x) for x in range(1000)]))
add("testTupleInputs", lambda ns: (lambda ds: [ns.spec(ds), ns.read_all(ds)])(
    from_list(ns, [(i32(1), i32(2)), (i32(3), i32(4))])), mode="value")
add("testNonRectangularInputs", lambda ns: (lambda ds: [ns.spec(ds), ns.read_all(ds)])(
    from_list(ns, [i32([[1]]), i32([[2, 3]]), i32([[4, 5, 6]])])), mode="value")
DICTS = [{"foo": i32([1, 2, 3]), "bar": np.array([[4.0], [5.0], [6.0]], np.float32)},
         {"foo": i32([4, 5, 6]), "bar": np.array([[7.0], [8.0], [9.0]], np.float32)}]
add("testDictInputs", lambda ns: (lambda ds: [ns.spec(ds), ns.read_all(ds)])(
    from_list(ns, DICTS)), mode="value")
UINTS = [(np.tile(np.array([[0], [1]], dtype=np.uint8), 2),
          np.tile(np.array([[2], [256]], dtype=np.uint16), 2),
          np.tile(np.array([[4], [65536]], dtype=np.uint32), 2),
          np.tile(np.array([[8], [4294967296]], dtype=np.uint64), 2))]
add("testUintInputs", lambda ns: from_list(ns, UINTS))
add("testDatasetInputs[ordered_dicts]", lambda ns: ns.Dataset.from_tensor_slices(
    [ns.Dataset.range(10).map(lambda x: collections.OrderedDict([("x", x)]))
     for _ in range(10)]).flat_map(lambda x: x))

add("FromListRandomAccessTest.testInvalidIndex[-1]", lambda ns: ns.at(
    from_list(ns, [i32(1), i32(2), i32(3)]), -1), mode="value")
add("FromListRandomAccessTest.testInvalidIndex[3]", lambda ns: ns.at(
    from_list(ns, [i32(1), i32(2), i32(3)]), 3), mode="value")
add("FromListRandomAccessTest.testOneDimensionalArray", lambda ns: (lambda ds: [
    ns.at(ds, i) for i in range(3)])(from_list(ns, [i32(1), i32(2), i32(3)])), mode="value")
add("FromListRandomAccessTest.testTwoDimensionalArray", lambda ns: (lambda ds: [
    ns.at(ds, i) for i in range(2)])(from_list(ns, [i32([1, 2]), i32([3, 4])])), mode="value")
add("FromListRandomAccessTest.testDictionary", lambda ns: (lambda ds: [
    ns.at(ds, i) for i in range(2)])(from_list(ns, [{"a": i32(1), "b": i32(3)},
                                                    {"a": i32(2), "b": i32(4)}])),
    mode="value")
NUMPY = [np.tile(np.array([[k], [v]], dtype=np.uint64), 2)
         for k, v in ((0, 1), (2, 256), (4, 65536), (8, 4294967296))]
add("FromListRandomAccessTest.testNumpy", lambda ns: (lambda ds: [
    ns.at(ds, i) for i in range(4)])(from_list(ns, NUMPY)), mode="value")

EQUAL = [np.tile(np.array([[1], [2], [3], [4]]), 20), np.tile(np.array([[12], [13], [14], [15]]),
                                                            20), np.tile(np.array([[37], [38],
                                                                                   [39], [40]]),
                                                                         20)]
SUITE.checkpoint("FromListCheckpointTest.test", lambda ns: from_list(ns, EQUAL))
SUITE.checkpoint("FromListCheckpointTest.testDict", lambda ns: from_list(ns, [
    {"foo": i32(k), "bar": np.float32(v)} for k, v in ((1, 4.0), (2, 5.0), (3, 6.0))]))

SUITE.skip("testDatasetInputs[simple]", "the same as from_tensor_slices_test's "
           "testFromTensorSlicesDataset, ported there")
SUITE.skip("FromListRandomAccessTest.testName", "name= only labels TF's graph node (covered by "
           "the feedline tests)")
