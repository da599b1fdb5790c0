"""Port of tensorflow/python/data/kernel_tests/unbatch_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("unbatch_test.py")
add = SUITE.add

R10 = np.arange(10, dtype=np.int32)

add("testUnbatchWithUnknownRankInput", lambda ns: ns.Dataset.from_tensors(
    np.array([0, 1, 2, 3], np.int32)).unbatch())
add("testUnbatchScalarDataset", lambda ns: ns.Dataset.from_tensor_slices(
    (R10, R10, R10)).batch(2).unbatch())
add("testUnbatchScalarDataset[element_spec]", lambda ns: ns.spec(ns.Dataset.from_tensor_slices(
    (R10, R10, R10)).batch(2).unbatch()), mode="value")
add("testUnbatchDatasetWithStrings", lambda ns: ns.Dataset.from_tensor_slices((R10, R10, R10))
    .map(lambda x, y, z: (x, ns.as_string(y), z)).batch(2).unbatch())
add("testUnbatchSingleElementTupleDataset", lambda ns: ns.Dataset.from_tensor_slices(
    ((R10,), (R10,), (R10,))).batch(2).unbatch())
add("testUnbatchSingleElementTupleDataset[element_spec]", lambda ns: ns.spec(
    ns.Dataset.from_tensor_slices(((R10,), (R10,), (R10,))).batch(2).unbatch()), mode="value")
HI = np.array([b"hi"] * 10, dtype=object)
add("testUnbatchMultiElementTupleDataset", lambda ns: ns.Dataset.from_tensor_slices(
    tuple((np.arange(10 * i, 10 * i + 10, dtype=np.int32), HI) for i in range(3)))
    .batch(2).unbatch())
add("testUnbatchEmpty", lambda ns: ns.Dataset.from_tensors(
    (np.zeros([0], np.float32), np.zeros([0, 4], np.float32), np.zeros([0, 4, 0], np.float32)))
    .unbatch())
add("testUnbatchStaticShapeMismatch", lambda ns: ns.Dataset.from_tensors(
    (np.arange(7), np.arange(8), np.arange(9))).unbatch())


def _dynamic_mismatch(ns):
    # TF's graph-mode placeholders become a generator whose shapes are only known at run time.
    def gen():
        yield np.arange(7, dtype=np.int32), np.arange(8, dtype=np.int32)
    return ns.from_generator(gen, (ns.TensorSpec([None], np.int32),
                                   ns.TensorSpec([None], np.int32))).unbatch()


add("testUnbatchDynamicShapeMismatch", _dynamic_mismatch)
UINTS = (np.tile(np.array([[0], [1], [2], [3]], dtype=np.uint8), 2),
         np.tile(np.array([[1], [2], [3], [256]], dtype=np.uint16), 2),
         np.tile(np.array([[2], [3], [4], [65536]], dtype=np.uint32), 2),
         np.tile(np.array([[3], [4], [5], [4294967296]], dtype=np.uint64), 2))
add("testUnbatchDatasetWithUintDtypes",
    lambda ns: ns.Dataset.from_tensor_slices(UINTS).batch(2).unbatch())
add("testNoneComponent", lambda ns: ns.Dataset.from_tensors(
    (np.arange(10, dtype=np.int32), None)).unbatch().map(lambda x, y: x))
add("testName", lambda ns: ns.Dataset.from_tensors(np.array([42], np.int32))
    .unbatch(name="unbatch"))


def _checkpoint_ds(ns):
    n = np.arange(8, dtype=np.int64)
    components = (n, np.array([[1, 2, 3]], np.int64) * n[:, None], np.array(15.0) * n)
    return ns.Dataset.from_tensor_slices(components).batch(2).unbatch()


SUITE.checkpoint("UnbatchCheckpointTest.test", _checkpoint_ds)

add("UnbatchRandomAccessTest.test", lambda ns: (lambda ds: [ns.at(ds, i) for i in range(8)])(
    ns.Dataset.range(10).batch(4, drop_remainder=True).unbatch()), mode="value")
add("UnbatchRandomAccessTest.testNotDropRemainder", lambda ns: ns.at(
    ns.Dataset.range(10).batch(4, drop_remainder=False).unbatch(), 0), mode="value")
for index in (-1, 100):
    add(f"UnbatchRandomAccessTest.testInvalidIndex[index={index}]",
        lambda ns, i=index: ns.at(ns.Dataset.range(10).batch(4, drop_remainder=True)
                                  .unbatch(), i), mode="value")

add("testUnbatchNestedDataset", lambda ns: ns.Dataset.from_tensors(
    [ns.Dataset.range(10) for _ in range(10)]).unbatch().flat_map(lambda x: x))
for name in ("testUnbatchDatasetWithSparseTensor",
             "testUnbatchDatasetWithDenseSparseAndRaggedTensor",
             "testUnbatchDatasetWithRaggedTensor"):
    SUITE.skip(name, "SparseTensor / RaggedTensor: feedline has neither")
SUITE.skip("testUnbatchDynamicShapeMismatch (scalar component)", "a component of unknown rank "
           "(graph-mode placeholder without shape)")
