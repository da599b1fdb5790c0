"""Port of tensorflow/python/data/kernel_tests/take_while_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite, label, params

SUITE = Suite("take_while_test.py")
add = SUITE.add

for p in params(num_elements=[14, 15], window_size=[2]) + params(num_elements=[100],
                                                                  window_size=[3]):
    add("testTakeWhileDataset" + label(p),
        lambda ns, n=p["num_elements"], w=p["window_size"]: ns.Dataset.range(n).batch(w)
        .take_while(predicate=lambda e: ns.shape(e)[0] > (w - 1))
        .flat_map(ns.Dataset.from_tensor_slices))
for n, bound in ((10, 2), (16, 7), (100, 99), (100, 101), (0, 1)):
    add(f"testTakeWhileDatasetRange[num_elements={n},upper_bound={bound}]",
        lambda ns, n=n, b=bound: ns.Dataset.range(n).take_while(lambda x: x < b))
add("testTakeWhileDatasetString", lambda ns: ns.Dataset.from_tensor_slices(
    np.array([b"this", b"is", b"the", b"test", b"for", b"strings"], dtype=object))
    .take_while(predicate=lambda x: ns.not_equal(x, ns.constant(b"test"))))
for size, index in ((5, 3), (10, 0), (100, 5), (8, 7)):
    flags = np.ones(size, dtype=bool)
    flags[index] = False
    add(f"testTakewhileDatasetShortCircuit[size={size},index={index}]",
        lambda ns, f=flags: ns.Dataset.from_tensor_slices(f).take_while(predicate=lambda e: e))
add("testTakeWhileDatasetWithRepeat", lambda ns: ns.Dataset.range(10)
    .take_while(predicate=lambda x: x < 2).repeat(5))

for p in params(num_elements=[10, 23], upper_bound=[10, 23]):
    SUITE.checkpoint("TakeWhileCheckpointTest.test" + label(p),
                     lambda ns, n=p["num_elements"], b=p["upper_bound"]: ns.Dataset.range(n)
                     .take_while(predicate=lambda x: x < b))
