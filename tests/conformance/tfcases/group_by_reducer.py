"""Port of tensorflow/python/data/experimental/kernel_tests/group_by_reducer_test.py."""

from __future__ import annotations

from typing import Any

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("group_by_reducer_test.py")
add = SUITE.add


def group_by_reducer(ns: Any, dataset: Any, key_func: Any, init: Any, reduce: Any,
                     finalize: Any) -> Any:
    """TF's ``apply(group_by_reducer(key_func, Reducer(...)))``; feedline's method."""
    if ns.name == "tensorflow":
        experimental = ns.tf_module.data.experimental
        return dataset.apply(experimental.group_by_reducer(
            key_func, experimental.Reducer(init, reduce, finalize)))
    import feedline as fl

    return dataset.group_by_reducer(key_func, fl.Reducer(init, reduce, finalize))


for i in range(1, 11):
    add(f"testSum[{i}]", lambda ns, i=i: group_by_reducer(
        ns, ns.Dataset.range(2 * i), lambda x: x % 2, lambda _: np.int64(0),
        lambda x, y: x + y, lambda x: x))
    add(f"testAverage[{i}]", lambda ns, i=i: group_by_reducer(
        ns, ns.Dataset.range(2 * i), lambda x: ns.cast(x, np.int64) % 2,
        lambda _: (np.float32(0.0), np.float32(0.0)),
        lambda x, y: ((x[0] * x[1] + ns.cast(y, np.float32)) / (x[1] + 1), x[1] + 1),
        lambda x, _: x))
    CHARS = np.array([c.encode() for c in "abcdefghijklmnopqrst"], dtype=object)
    add(f"testConcat[{i}]", lambda ns, i=i, chars=CHARS: group_by_reducer(
        ns, ns.Dataset.zip((ns.Dataset.from_tensor_slices(chars), ns.Dataset.range(2 * i))),
        lambda x, y: y % 2, lambda _: b"", lambda x, y: x + y[0], lambda x: x))

add("testTypeMismatch", lambda ns: group_by_reducer(
    ns, ns.Dataset.range(10), lambda _: np.int64(0), lambda _: np.int32(1),
    lambda x, y: np.int64(1), lambda x: x))
add("testInvalidKeyShape", lambda ns: group_by_reducer(
    ns, ns.Dataset.range(10), lambda _: np.array([0, 0], np.int64), lambda _: np.int64(0),
    lambda x, y: x + y, lambda x: x))
add("testInvalidKeyType", lambda ns: group_by_reducer(
    ns, ns.Dataset.range(10), lambda _: "wrong", lambda _: np.int64(0),
    lambda x, y: x + y, lambda x: x))
add("testTuple", lambda ns: group_by_reducer(
    ns, ns.Dataset.zip((ns.Dataset.range(10), ns.Dataset.range(10))),
    lambda x, y: np.int64(0), lambda _: (np.array([], np.int64), np.int64(0)),
    lambda state, value: (ns.concat([state[0], ns.stack([value[0]])], 0),
                          state[1] + value[1]),
    lambda s1, s2: (s1, s2)))

SUITE.skip("testSparseSum", "SparseTensor states built by TF ops")
SUITE.skip("testChangingStateShape", "a state of statically unknown rank (TF's trace)")
