"""Port of tensorflow/python/data/kernel_tests/get_single_element_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite, label, params

SUITE = Suite("get_single_element_test.py")
add = SUITE.add

# TF's element also holds a SparseTensor of x; the port keeps the dense part.
for p in (params(skip=[0, 5, 10], take=[1]) + params(skip=[100], take=[1])
          + params(skip=[0], take=[2])):
    add("testBasic" + label(p), lambda ns, p=p: ns.Dataset.range(100).skip(p["skip"])
        .map(lambda x: x * x).take(p["take"]).get_single_element(), mode="value")

add("testWindow", lambda ns: ns.Dataset.range(10).window(2).flat_map(
    lambda ds: ns.Dataset.from_tensors(ds.batch(2).get_single_element())))
add("testName", lambda ns: ns.Dataset.from_tensors(np.int32(42)).get_single_element(
    name="get_single_element"), mode="value")

SUITE.skip("testBasic (SparseTensor component)", "SparseTensor built by a TF op in map")
for name in ("testSideEffect", "testAutomaticControlDependencies"):
    SUITE.skip(name, "tf.Variable side effects inside a tf.function")
