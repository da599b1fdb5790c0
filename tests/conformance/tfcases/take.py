"""Port of tensorflow/python/data/kernel_tests/take_test.py."""

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

SUITE = Suite("take_test.py")
add = SUITE.add

for count in (-1, 0, 4, 10, 25):
    add(f"testBasic[count={count}]", lambda ns, c=count: ns.Dataset.from_tensor_slices(
        (np.arange(10, dtype=np.int64),)).take(c))
add("testBasic[element_spec]", lambda ns: ns.spec(ns.Dataset.from_tensor_slices(
    (np.arange(10, dtype=np.int64),)).take(4)), mode="value")
add("testName", lambda ns: ns.Dataset.from_tensors(np.int32(42)).take(1, name="take"))

for count in (50, 200, 100, -1, 0):
    SUITE.checkpoint(f"TakeDatasetCheckpointTest.test[count={count}]",
                     lambda ns, c=count: ns.Dataset.range(100).take(c))

for index in (-1, 3, 4):
    add(f"TakeRandomAccessTest.testInvalidIndex[index={index}]",
        lambda ns, i=index: ns.at(ns.Dataset.range(10).take(3), i), mode="value")
for index in (-2, 0, 1):
    add(f"TakeRandomAccessTest.testEmptyDataset[index={index}]",
        lambda ns, i=index: ns.at(ns.Dataset.from_tensor_slices(
            np.array([], np.float32)).take(5), i), mode="value")
for count in (-1, 0, 4, 10, 25):
    add(f"TakeRandomAccessTest.testBasic[count={count}]",
        lambda ns, c=count: (lambda ds: [attempt(ns, lambda i=i: ns.at(ds, i))
                                         for i in range(11)])(ns.Dataset.range(10).take(c)),
        mode="value")


for p in params(count=[20, 200], repetitions=[1, 2], seed=[None, 42],
                reshuffle_each_iteration=[True, False]):
    def build(ns, p=p):
        ds = ns.Dataset.range(100).take(p["count"]).prefetch(ns.AUTOTUNE)
        if p["repetitions"] > 1:
            ds = ds.repeat(p["repetitions"])
        ds = ns.global_shuffle(ds, p["seed"], p["reshuffle_each_iteration"])
        return shuffle_summary(ns, ds, list(range(min(p["count"], 100))) * p["repetitions"])
    add("TakeGlobalShuffleTest.test" + label(p), build, mode="value")

for p in params(count=[2, 20], repetitions=[1, 2], reshuffle_each_iteration=[True, False]):
    def build(ns, p=p):
        ds = ns.Dataset.range(10).take(p["count"]).prefetch(ns.AUTOTUNE)
        if p["repetitions"] > 1:
            ds = ds.repeat(p["repetitions"])
        return ns.global_shuffle(ds, 42, p["reshuffle_each_iteration"])
    SUITE.checkpoint("TakeGlobalShuffleCheckpointTest.test" + label(p), build,
                     derive=derive_sorted if p["reshuffle_each_iteration"] else restored_matches)

SUITE.skip("TakeDatasetCheckpointTest (symbolic_checkpoint=True)",
           "Options.experimental_symbolic_checkpoint: a TF checkpoint format")
