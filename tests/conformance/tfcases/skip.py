"""Port of tensorflow/python/data/kernel_tests/skip_test.py."""

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

SUITE = Suite("skip_test.py")
add = SUITE.add

for count in (-1, 0, 4, 10, 25):
    add(f"testBasic[count={count}]", lambda ns, c=count: ns.Dataset.from_tensor_slices(
        (np.arange(10, dtype=np.int64),)).skip(c))
add("testName", lambda ns: ns.Dataset.from_tensors(np.int32(42)).skip(0, name="skip"))

for count in (50, 200, 100, -1, 0):
    SUITE.checkpoint(f"SkipDatasetCheckpointTest.test[count={count}]",
                     lambda ns, c=count: ns.Dataset.range(100).skip(c))

for index in (-1, 2, 3):
    add(f"SkipRandomAccessTest.testInvalidIndex[index={index}]",
        lambda ns, i=index: ns.at(ns.Dataset.range(10).skip(8), i), mode="value")
for index in (-1, 0):
    add(f"SkipRandomAccessTest.testEmptyDataset[index={index}]",
        lambda ns, i=index: ns.at(ns.Dataset.from_tensor_slices(
            np.array([], np.float32)).skip(8), i), mode="value")
add("SkipRandomAccessTest.testBasic", lambda ns: (lambda ds: [
    ns.at(ds, i) for i in range(8)])(ns.Dataset.range(11).skip(3)), mode="value")
for skip in (-2, -1):
    add(f"SkipRandomAccessTest.testNegativeSkip[skip={skip}]",
        lambda ns, s=skip: ns.at(ns.Dataset.range(11).skip(s), 0), mode="value")
for skip in (5, 8):
    add(f"SkipRandomAccessTest.testSkipGreaterThanNumElements[skip={skip}]",
        lambda ns, s=skip: ns.at(ns.Dataset.range(4).skip(s), 0), mode="value")
for p in params(elements=[0, 5, 10], skip=[-1, 0, 5, 15]):
    add("SkipRandomAccessTest.testMultipleCombinations" + label(p),
        lambda ns, e=p["elements"], s=p["skip"]: (lambda ds: [
            attempt(ns, lambda i=i: ns.at(ds, i)) for i in range(max(ns.cardinality(ds), 0) + 1)])(
            ns.Dataset.range(e).skip(s)), mode="value")

for p in params(count=[0, 2], repetitions=[1, 2], seed=[None, 42],
                reshuffle_each_iteration=[True, False]):
    def build(ns, p=p):
        ds = ns.Dataset.range(10).skip(p["count"]).prefetch(ns.AUTOTUNE)
        if p["repetitions"] > 1:
            ds = ds.repeat(p["repetitions"])
        ds = ns.global_shuffle(ds, p["seed"], p["reshuffle_each_iteration"])
        return shuffle_summary(ns, ds, list(range(p["count"], 10)) * p["repetitions"])
    add("SkipGlobalShuffleTest.testSkip" + label(p), build, mode="value")
for skip in (-2, -1):
    add(f"SkipGlobalShuffleTest.testNegativeSkip[skip={skip}]",
        lambda ns, s=skip: ns.global_shuffle(ns.Dataset.range(10).skip(s)))

for p in params(count=[0, 2], repetitions=[1, 2], reshuffle_each_iteration=[True, False]):
    def build(ns, p=p):
        ds = ns.Dataset.range(10).skip(p["count"]).prefetch(ns.AUTOTUNE)
        if p["repetitions"] > 1:
            ds = ds.repeat(p["repetitions"])
        return ns.global_shuffle(ds, 42, p["reshuffle_each_iteration"])
    SUITE.checkpoint("SkipGlobalShuffleCheckpointTest.testSkip" + label(p), build,
                     derive=derive_sorted if p["reshuffle_each_iteration"] else restored_matches)

SUITE.skip("SkipDatasetCheckpointTest (symbolic_checkpoint=True)",
           "Options.experimental_symbolic_checkpoint: a TF checkpoint format")
