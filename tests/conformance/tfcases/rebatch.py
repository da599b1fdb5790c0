"""Port of tensorflow/python/data/kernel_tests/rebatch_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("rebatch_test.py")
add = SUITE.add


def _spec_case(name, build):
    add(name, lambda ns: ns.spec(build(ns)), mode="value")


_spec_case("testShapeInferenceNotAllBatchSizesEqual", lambda ns: ns.Dataset.range(8)
           .batch(4, drop_remainder=True).rebatch(batch_size=[2, 1, 1]))
for drop in (True, False):
    _spec_case(f"testShapeInferenceInputBatchDimDivisible[drop_remainder={drop}]",
               lambda ns, d=drop: ns.Dataset.range(8).batch(4, drop_remainder=True)
               .rebatch(batch_size=[2, 2], drop_remainder=d))
_spec_case("testShapeInferenceInputBatchDimUnknown", lambda ns: ns.Dataset.range(8)
           .batch(4, drop_remainder=False).rebatch(batch_size=[2, 2], drop_remainder=False))
_spec_case("testShapeInferenceInputBatchDimUnknownWithDropRemainder", lambda ns: ns.Dataset
           .range(8).batch(4, drop_remainder=False).rebatch(batch_size=[2, 2],
                                                            drop_remainder=True))
_spec_case("testShapeInferenceInputBatchDimIndivisible", lambda ns: ns.Dataset.range(10)
           .batch(5, drop_remainder=True).rebatch(batch_size=[2, 2], drop_remainder=False))
_spec_case("testShapeInferenceInputBatchDimIndivisibleWithDropRemainder", lambda ns: ns.Dataset
           .range(10).batch(5, drop_remainder=True).rebatch(batch_size=[2, 2],
                                                            drop_remainder=True))

for drop in (True, False):
    tag = f"[drop_remainder={drop}]"
    add("testBasic" + tag, lambda ns, d=drop: ns.Dataset.range(8).batch(4, drop_remainder=True)
        .rebatch(batch_size=[2, 2], drop_remainder=d))
    add("testBatchSizeGreaterThanOriginal" + tag, lambda ns, d=drop: ns.Dataset.range(12)
        .batch(4, drop_remainder=False).rebatch(batch_size=[6], drop_remainder=d))
    for batch_size in (2, 3, 4):
        add(f"testBatchSizeEqualToOriginal[batch_size={batch_size},drop_remainder={drop}]",
            lambda ns, b=batch_size, d=drop: ns.Dataset.range(11).batch(b, drop_remainder=d)
            .rebatch(batch_size=b, drop_remainder=False))
    add("testEmptySplits" + tag, lambda ns, d=drop: ns.Dataset.range(8)
        .batch(4, drop_remainder=True).rebatch(batch_size=[1, 1, 1, 1, 0], drop_remainder=d))
    add("testEmptyFirstSplits" + tag, lambda ns, d=drop: ns.Dataset.range(8)
        .batch(4, drop_remainder=True).rebatch(batch_size=[0, 1], drop_remainder=d))
    add("testEmptyLastSplits" + tag, lambda ns, d=drop: ns.Dataset.range(8)
        .batch(4, drop_remainder=True).rebatch(batch_size=[1, 0], drop_remainder=d))
    add("testEmptyTensors" + tag, lambda ns, d=drop: ns.Dataset.range(8)
        .map(lambda x: ns.zeros([5, 0], np.float32)).batch(2)
        .rebatch(batch_size=4, drop_remainder=d))
    add("testScalarBatchSizeInput" + tag, lambda ns, d=drop: ns.Dataset.range(8)
        .batch(4, drop_remainder=True).rebatch(batch_size=2, drop_remainder=d))
add("testPartialBatch", lambda ns: ns.Dataset.range(5).batch(4, drop_remainder=False)
    .rebatch(batch_size=[2, 2], drop_remainder=False))
add("testPartialBatchWithDropRemainder", lambda ns: ns.Dataset.range(5)
    .batch(4, drop_remainder=False).rebatch(batch_size=[2, 2], drop_remainder=True))
add("testMultipleBatches", lambda ns: ns.Dataset.range(16).batch(2, drop_remainder=True)
    .batch(4, drop_remainder=True).rebatch([2, 2]))
_spec_case("testMultipleBatches[element_spec]", lambda ns: ns.Dataset.range(16)
           .batch(2, drop_remainder=True).batch(4, drop_remainder=True).rebatch([2, 2]))
add("testNestedDictionaryOutput", lambda ns: ns.Dataset.range(8)
    .map(lambda x: {"a": x, "b": {"c": x + 1}}).batch(4, drop_remainder=True).rebatch([2, 2]))
add("testNoneDataset", lambda ns: ns.Dataset.range(4).map(lambda x: (x, None))
    .batch(4, drop_remainder=True).rebatch(batch_size=[2, 2]).map(lambda x, y: x))

SUITE.checkpoint("RebatchDatasetCheckpointTest.test", lambda ns: ns.Dataset.range(64)
                 .batch(16, drop_remainder=True).rebatch(batch_size=[8, 8]))

SUITE.skip("testRaggedDataset", "RaggedTensor: feedline has no ragged batching")
