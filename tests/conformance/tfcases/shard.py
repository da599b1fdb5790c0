"""Port of tensorflow/python/data/kernel_tests/shard_test.py."""

from __future__ import annotations

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

SUITE = Suite("shard_test.py")
add = SUITE.add

for name, n, num_shards, index in (
        ("testSimpleCase", 10, 5, 2), ("testOffsetZero", 10, 5, 0),
        ("testOffsetGreaterNumShards", 10, 5, 7), ("testNegativeOffset", 10, 5, -3),
        ("testNegativeNumShards", 10, -3, 1), ("testZeroNumShards", 10, 0, 1),
        ("testIteratorEndsBeforeFirstElem", 1, 5, 2), ("testLargerWorkerPool", 10, 7, 5),
        ("testIndexEqualsNumShards", 10, 5, 4), ("testIndexEqualsNumShards2", 10, 4, 3),
        ("testNumShardsLargerThanDataset", 10, 20, 5)):
    add(name, lambda ns, n=n, s=num_shards, i=index: ns.Dataset.range(n).shard(s, i))
add("testNestedData", lambda ns: ns.Dataset.zip((ns.Dataset.range(10),
                                                 ns.Dataset.range(10, 0, -1))).shard(5, 2))
add("testName", lambda ns: ns.Dataset.from_tensors(np.int32(42)).shard(1, 0, name="shard"))

for p in params(elems=[10, 100], num_shards=[2, 5], index=[0, 1]):
    SUITE.checkpoint("ShardCheckpointTest.test" + label(p),
                     lambda ns, p=p: ns.Dataset.range(p["elems"]).shard(p["num_shards"],
                                                                        p["index"]))

for index in (-1, 2, 3, 4):
    add(f"ShardRandomAccessTest.testInvalidIndex[index={index}]",
        lambda ns, i=index: ns.at(ns.Dataset.range(4).shard(num_shards=2, index=0), i),
        mode="value")
add("ShardRandomAccessTest.testEmptyDataset", lambda ns: ns.at(
    ns.Dataset.from_tensor_slices(np.array([], np.float32)).shard(num_shards=2, index=1), 0),
    mode="value")


def _all_at(ns, ds, n):
    return [attempt(ns, lambda i=i: ns.at(ds, i)) for i in range(n)]


add("ShardRandomAccessTest.testNumShardsAndIndexLessThanNumElements",
    lambda ns: _all_at(ns, ns.Dataset.range(10).shard(5, 0), 3), mode="value")
add("ShardRandomAccessTest.testNumShardsGreaterThanNumElementsIndexLess",
    lambda ns: _all_at(ns, ns.Dataset.range(7).shard(8, 3), 2), mode="value")
add("ShardRandomAccessTest.testNumShardsAndIndexGreaterThanNumElements",
    lambda ns: _all_at(ns, ns.Dataset.range(13).shard(23, 21), 1), mode="value")
for p in params(elements=[0, 10, 50], num_shards=[5, 7, 10], index=[0, 1, 2, 3, 4]):
    add("ShardRandomAccessTest.testMultipleCombinations" + label(p),
        lambda ns, p=p: (lambda ds: _all_at(ns, ds, ns.cardinality(ds) + 1))(
            ns.Dataset.range(p["elements"]).shard(num_shards=p["num_shards"],
                                                  index=p["index"])), mode="value")

for p in params(num_shards=[1, 3, 5], shard_index=[0, 1, 2, 4], seed=[None, 42],
                reshuffle_each_iteration=[True, False]):
    if p["shard_index"] >= p["num_shards"]:
        continue
    def build(ns, p=p):
        ds = ns.Dataset.range(100).shard(p["num_shards"], p["shard_index"]).prefetch(
            ns.AUTOTUNE)
        ds = ns.global_shuffle(ds, p["seed"], p["reshuffle_each_iteration"])
        return shuffle_summary(ns, ds, list(range(p["shard_index"], 100, p["num_shards"])))
    add("ShardGlobalShuffleTest.testShard" + label(p), build, mode="value")

for p in params(num_shards=[1, 3], shard_index=[0, 1, 2], reshuffle_each_iteration=[True, False]):
    if p["shard_index"] >= p["num_shards"]:
        continue
    SUITE.checkpoint(
        "ShardGlobalShuffleCheckpointTest.testShard" + label(p),
        lambda ns, p=p: ns.global_shuffle(
            ns.Dataset.range(10).shard(p["num_shards"], p["shard_index"]).prefetch(ns.AUTOTUNE),
            42, p["reshuffle_each_iteration"]),
        derive=derive_sorted if p["reshuffle_each_iteration"] else restored_matches)

SUITE.skip("ShardCheckpointTest (symbolic_checkpoint=True)",
           "Options.experimental_symbolic_checkpoint: a TF checkpoint format")
