"""Port of tensorflow/python/data/kernel_tests/flat_map_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("flat_map_test.py")
add = SUITE.add

add("testFlatMapDataset", lambda ns: ns.Dataset.from_tensor_slices(
    np.array([1, 2, 3, 4, 5, 0, 1], np.int64))
    .flat_map(lambda x: ns.Dataset.from_tensors(ns.stack([x])).repeat(x)))
add("testNestedFlatMapDataset", lambda ns: ns.Dataset.from_tensor_slices(
    np.array([[1, 2], [3, 4], [5, 0], [1, 7]], np.int64))
    .flat_map(lambda x: ns.Dataset.from_tensor_slices(x)
              .flat_map(lambda y: ns.Dataset.from_tensors(y).repeat(y))))
add("testMapDict", lambda ns: ns.Dataset.range(10)
    .map(lambda x: {"foo": x * 2, "bar": x**2})
    .flat_map(lambda d: ns.Dataset.from_tensors(d["foo"]).repeat(d["bar"])))

# FlatMapCheckpointTest: TF's run_core_tests, as the checkpoint variants.
SUITE.checkpoint("FlatMapCheckpointTest.testCore", lambda ns: ns.Dataset.range(0, 25, 5)
                 .flat_map(lambda x: ns.Dataset.range(x, x + 5)))
SUITE.checkpoint("FlatMapCheckpointTest.testMapThenFlatMap", lambda ns: ns.Dataset.range(5)
                 .flat_map(lambda _: ns.Dataset.range(100)
                           .map(lambda y: np.int32(10) * ns.cast(y, np.int32))))
# TF's Defun is a plain function here.
SUITE.checkpoint("FlatMapCheckpointTest.testCaptureDefunInMapFn", lambda ns: ns.Dataset.range(100)
                 .flat_map(lambda x: ns.Dataset.from_tensor_slices(
                     ns.stack([np.int32(1000) + ns.cast(x, np.int32)]))))

SUITE.skip("testSharedResourceNestedFlatMapDataset", "one iterator resource shared by two "
           "graph-mode sessions on a local server")
for name in ("testSparse", "FlatMapCheckpointTest.testSparseCore"):
    SUITE.skip(name, "SparseTensor: feedline has no sparse tensors")
SUITE.skip("testTensorArray", "TensorArray elements (TF graph type)")
SUITE.skip("testRagged", "RaggedTensor: feedline has no ragged tensors in map")
for name in ("FlatMapCheckpointTest.testDisallowVariableCapture",
             "FlatMapCheckpointTest.testDisallowCapturingStatefulOps"):
    SUITE.skip(name, "TF refuses to save the state of captured variables / stateful TF ops; "
               "a Python function's state is opaque to feedline")
