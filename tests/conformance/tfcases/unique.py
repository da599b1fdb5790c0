"""Port of tensorflow/python/data/kernel_tests/unique_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("unique_test.py")
add = SUITE.add

INT_CASES = [[], [1], [1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0], [1, 2, 3, 4],
             [1, 2, 4, 3, 2, 1, 2, 3, 4], [[1], [1, 1], [1, 1, 1]],
             [[1, 1], [1, 1], [2, 2], [3, 3], [1, 1]]]
STRING_CASES = [[], ["hello"], ["hello", "hello", "hello"], ["hello", "world"],
                ["foo", "bar", "baz", "baz", "bar", "foo"]]


def _unique(ns, values, dtype):
    rank = 1 if values and isinstance(values[0], list) else 0

    def gen():
        for v in values:
            yield (np.array(v.encode(), dtype=object) if isinstance(v, str)
                   else np.array(v, dtype=dtype))
    return ns.from_generator(gen, ns.TensorSpec([None] * rank, dtype)).unique()


for dtype in (np.int32, np.int64):
    for i, values in enumerate(INT_CASES):
        add(f"testSimpleInt[{np.dtype(dtype).name},{i}:{values}]",
            lambda ns, v=values, d=dtype: _unique(ns, v, d))
for i, values in enumerate(STRING_CASES):
    add(f"testSimpleString[{i}:{values}]", lambda ns, v=values: _unique(ns, v, bytes))
for dtype in (np.bool_, np.float64, np.complex64, np.float32):
    add(f"testUnsupportedTypes[{np.dtype(dtype).name}]",
        lambda ns, d=dtype: ns.from_generator(lambda: iter([]), ns.TensorSpec([], d)).unique())
add("testName", lambda ns: ns.Dataset.from_tensors(np.int32(42)).unique(name="unique"))

SUITE.checkpoint("UniqueCheckpointTest.test", lambda ns: ns.Dataset.range(200)
                 .map(lambda x: x % 100).unique())

SUITE.skip("testUnsupportedTypes[qint16, qint32]", "quantized TF dtypes: NumPy has none")
