"""Port of tensorflow/python/data/kernel_tests/from_tensor_slices_test.py."""

from __future__ import annotations

import collections

import numpy as np

from tfcases.harness import (
    Suite,
    attempt,
    derive_sorted,
    label,
    params,
    restored_matches,
    shuffle_summary,
)

SUITE = Suite("from_tensor_slices_test.py")
add = SUITE.add

COMPONENTS = (np.tile(np.array([[1], [2], [3], [4]]), 20),
              np.tile(np.array([[12], [13], [14], [15]]), 22),
              np.array([37.0, 38.0, 39.0, 40.0]))
# TF's {"foo": [1, 2, 3], "bar": [[4.0], [5.0], [6.0]]} literals are int32 and float32.
DICT = {"foo": np.array([1, 2, 3], np.int32), "bar": np.array([[4.0], [5.0], [6.0]], np.float32)}
UINTS = (np.tile(np.array([[0], [1]], dtype=np.uint8), 2),
         np.tile(np.array([[2], [256]], dtype=np.uint16), 2),
         np.tile(np.array([[4], [65536]], dtype=np.uint32), 2),
         np.tile(np.array([[8], [4294967296]], dtype=np.uint64), 2))

add("testFromTensorSlicesEmptyComponent", lambda ns: ns.Dataset.from_tensor_slices(()))
add("testFromTensorSlices", lambda ns: ns.Dataset.from_tensor_slices(COMPONENTS))
add("testFromTensorSlices[element_spec]", lambda ns: ns.spec(
    ns.Dataset.from_tensor_slices(COMPONENTS)), mode="value")
add("testFromTensorSlicesWithDict", lambda ns: ns.Dataset.from_tensor_slices(DICT))
add("testFromTensorSlicesWithDict[element_spec]", lambda ns: ns.spec(
    ns.Dataset.from_tensor_slices(DICT)), mode="value")
add("testFromTensorSlicesWithUintDtypes", lambda ns: ns.Dataset.from_tensor_slices(UINTS))
add("testFromTensorSlicesWithUintDtypes[element_spec]", lambda ns: ns.spec(
    ns.Dataset.from_tensor_slices(UINTS)), mode="value")

I123 = np.array([1, 2, 3], np.int32)
for index in (-1, 3):
    add(f"FromTensorSlicesRandomAccessTest.testInvalidIndex[index={index}]",
        lambda ns, i=index: ns.at(ns.Dataset.from_tensor_slices(I123), i), mode="value")


def _all_at(ns, ds, n):
    return [attempt(ns, lambda i=i: ns.at(ds, i)) for i in range(n)]


add("FromTensorSlicesRandomAccessTest.testOneDimensionalArray",
    lambda ns: _all_at(ns, ns.Dataset.from_tensor_slices(I123), 3), mode="value")
add("FromTensorSlicesRandomAccessTest.testTwoDimensionalArray", lambda ns: _all_at(
    ns, ns.Dataset.from_tensor_slices(np.array([[1, 2], [3, 4]], np.int32)), 2), mode="value")
add("FromTensorSlicesRandomAccessTest.testMultipleComponents", lambda ns: _all_at(
    ns, ns.Dataset.from_tensor_slices(tuple(np.array(v, np.int32)
                                            for v in ([1, 2], [3, 4], [5, 6]))), 2),
    mode="value")
add("FromTensorSlicesRandomAccessTest.testDictionary", lambda ns: _all_at(
    ns, ns.Dataset.from_tensor_slices({"a": np.array([1, 2], np.int32),
                                       "b": np.array([3, 4], np.int32)}), 2), mode="value")
add("FromTensorSlicesRandomAccessTest.testNumpy",
    lambda ns: _all_at(ns, ns.Dataset.from_tensor_slices(UINTS), 3), mode="value")
add("FromTensorSlicesRandomAccessTest.testName", lambda ns: ns.Dataset.from_tensor_slices(
    np.array([42], np.int32), name="from_tensor_slices"))

SUITE.checkpoint("FromTensorSlicesCheckpointTest.test",
                 lambda ns: ns.Dataset.from_tensor_slices(COMPONENTS))
SUITE.checkpoint("FromTensorSlicesCheckpointTest.testDict",
                 lambda ns: ns.Dataset.from_tensor_slices(DICT))

for p in params(dataset_range=[10, 100], repetitions=[1, 3], seed=[None, 19],
                reshuffle_each_iteration=[True, False]):
    def build(ns, p=p):
        ds = ns.Dataset.from_tensor_slices(np.arange(p["dataset_range"], dtype=np.int32))
        if p["repetitions"] > 1:
            ds = ds.repeat(p["repetitions"])
        ds = ns.global_shuffle(ds, p["seed"], p["reshuffle_each_iteration"])
        return shuffle_summary(ns, ds, list(range(p["dataset_range"])) * p["repetitions"])
    add("FromTensorSlicesGlobalShuffleTest.testGlobalShuffleTensorSlicesDataset" + label(p),
        build, mode="value")
for p in params(repetitions=[1, 3], reshuffle_each_iteration=[True, False]):
    def build(ns, p=p):
        ds = ns.Dataset.from_tensor_slices(np.arange(10, dtype=np.int32))
        if p["repetitions"] > 1:
            ds = ds.repeat(p["repetitions"])
        return ns.global_shuffle(ds, 42, p["reshuffle_each_iteration"])
    SUITE.checkpoint("FromTensorSlicesGlobalShuffleCheckpointTest."
                     "testGlobalShuffleTensorSlicesDataset" + label(p), build,
                     derive=derive_sorted if p["reshuffle_each_iteration"] else restored_matches)

add("testFromTensorSlicesDataset", lambda ns: ns.Dataset.from_tensor_slices(
    [ns.Dataset.range(10) for _ in range(10)]).flat_map(lambda x: x))
add("testFromTensorSlicesDatasetOfOrderedDict", lambda ns: ns.Dataset.from_tensor_slices(
    [ns.Dataset.range(10).map(lambda x: collections.OrderedDict([("x", x)]))
     for _ in range(10)]).flat_map(lambda x: x))
SUITE.skip("testFromTensorSlicesDatasetInFunction", "dataset built inside a tf.function")
for name in ("testFromTensorSlicesSparse", "testFromTensorSlicesMixed",
             "testFromTensorSlicesRagged", "testFromTensorSlicesMixedRagged"):
    SUITE.skip(name, "SparseTensor / RaggedTensor: feedline has neither")
