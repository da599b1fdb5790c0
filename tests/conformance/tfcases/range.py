"""Port of tensorflow/python/data/kernel_tests/range_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite, attempt, label, params

SUITE = Suite("range_test.py")
add = SUITE.add

DTYPES = (np.int32, np.int64, np.float32, np.float64)
for name, args in (("testStop", (5,)), ("testStartStop", (2, 5)),
                   ("testStartStopStep", (2, 10, 2)), ("testZeroStep", (2, 10, 0)),
                   ("testNegativeStep", (2, 10, -1)), ("testStopLessThanStart", (10, 2)),
                   ("testStopLessThanStartWithPositiveStep", (10, 2, 2)),
                   ("testStopLessThanStartWithNegativeStep", (10, 2, -1))):
    for dtype in DTYPES:
        add(f"{name}[output_type={np.dtype(dtype).name}]",
            lambda ns, a=args, d=dtype: ns.range(*a, dtype=d))
    add(f"{name}[element_spec]", lambda ns, a=args: ns.spec(ns.range(*a, dtype=np.int32)),
        mode="value")
add("testName", lambda ns: ns.Dataset.range(5, name="range"))

SUITE.checkpoint("RangeCheckpointTest.test", lambda ns: ns.Dataset.range(2, 10))

for index in (-1, 2, 3):
    add(f"RangeRandomAccessTest.testInvalidIndex[index={index}]",
        lambda ns, i=index: ns.at(ns.Dataset.range(2), i), mode="value")
for index in (-1, 0):
    add(f"RangeRandomAccessTest.testEmptyDataset[index={index}]",
        lambda ns, i=index: ns.at(ns.Dataset.range(0), i), mode="value")
add("RangeRandomAccessTest.testBasic", lambda ns: (lambda ds: [ns.at(ds, i) for i in range(10)])(
    ns.Dataset.range(10)), mode="value")
for p in params(start=[-1, 0, 5], stop=[-5, 0, 10], step=[-3, 1, 5], output_type=DTYPES):
    name = label({**p, "output_type": np.dtype(p["output_type"]).name})
    add("RangeRandomAccessTest.testMultipleCombinations" + name,
        lambda ns, p=p: (lambda ds: [attempt(ns, lambda i=i: ns.at(ds, i))
                                     for i in range(ns.cardinality(ds) + 1)])(
            ns.range(p["start"], p["stop"], p["step"], dtype=p["output_type"])), mode="value")
