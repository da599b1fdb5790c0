"""Port of tensorflow/python/data/kernel_tests/prefetch_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite, attempt, label, params

SUITE = Suite("prefetch_test.py")
add = SUITE.add

for buffer_size in (-1, None, 0, 42):
    add(f"testBufferSize[buffer_size={buffer_size}]",
        lambda ns, b=buffer_size: ns.Dataset.range(10).prefetch(buffer_size=b))
for buffer_size in (-2, -42):
    add(f"testInvalidBufferSize[buffer_size={buffer_size}]",
        lambda ns, b=buffer_size: ns.Dataset.range(10).prefetch(buffer_size=b))
add("testName", lambda ns: ns.Dataset.from_tensors(np.int32(42)).prefetch(1, name="prefetch"))

SUITE.checkpoint("PrefetchCheckpointTest.test", lambda ns: ns.Dataset.range(100).prefetch(10))

for index in (-1, 10, 11):
    add(f"PrefetchRandomAccessTest.testInvalidIndex[index={index}]",
        lambda ns, i=index: ns.at(ns.Dataset.range(10).prefetch(buffer_size=5), i), mode="value")
for index in (-2, 0, 1):
    add(f"PrefetchRandomAccessTest.testEmptyDataset[index={index}]",
        lambda ns, i=index: ns.at(ns.Dataset.from_tensor_slices(
            np.array([], np.float32)).prefetch(buffer_size=5), i), mode="value")
for p in params(elements=[10, 50, 100], buffer_size=[0, 5, 10]):
    add("PrefetchRandomAccessTest.testMultipleCombinations" + label(p),
        lambda ns, p=p: (lambda ds: [attempt(ns, lambda i=i: ns.at(ds, i))
                                     for i in range(ns.cardinality(ds) + 1)])(
            ns.Dataset.range(p["elements"]).prefetch(buffer_size=p["buffer_size"])),
        mode="value")

SUITE.skip("testPrefetchWithSlack", "PrefetchDataset(slack_period=...): a TF-internal "
           "performance option")
SUITE.skip("testPrefetchCancellation", "graph-mode session close cancelling a blocked "
           "get_next (TF1)")
