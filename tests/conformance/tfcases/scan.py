"""Port of tensorflow/python/data/kernel_tests/scan_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("scan_test.py")
add = SUITE.add

# TF makes int32 tensors of the Python ints the test uses; the port spells them int32.
for start, step, take in ((0, 1, 10), (0, 1, 0), (10, 1, 10), (10, 2, 10), (10, -1, 10),
                          (10, -2, 10)):
    add(f"testCount[start={start},step={step},take={take}]",
        lambda ns, a=start, b=step, c=take: ns.Dataset.from_tensors(np.int32(0)).repeat()
        .scan(initial_state=np.int32(a), scan_func=lambda state, _: (state + np.int32(b), state))
        .take(c))
add("testFibonacci", lambda ns: ns.Dataset.from_tensors(np.int32(1)).repeat(None).scan(
    initial_state=np.array([0, 1], np.int32), scan_func=lambda a, _: ([a[1], a[0] + a[1]], a[1]))
    .take(6))


def _changing_state_shape(ns):
    def scan_fn(state, input_value):
        longer = ns.concat([state[0], state[0]], 0)
        larger_rank = ns.expand_dims(state[1], 0)
        return (longer, larger_rank), (state, input_value)
    return ns.Dataset.from_tensors(np.int32(0)).repeat(5).scan(
        initial_state=(np.array([0], np.int32), np.int32(1)), scan_func=scan_fn)


add("testChangingStateShape", _changing_state_shape)
add("testIncorrectStateType", lambda ns: ns.Dataset.range(10).scan(
    initial_state=np.int32(1), scan_func=lambda state, _: (np.int64(1), state)))
add("testIncorrectReturnType", lambda ns: ns.Dataset.range(10).scan(
    initial_state=np.int32(1), scan_func=lambda state, x: np.int64(1)))


def _raise_stop(_):
    raise StopIteration()


add("testPreserveCardinality", lambda ns: ns.Dataset.from_tensors(np.int64(0)).scan(
    initial_state=np.int32(1),
    scan_func=lambda state, val: (state, ns.call_python(_raise_stop, [val], np.int64))))
add("testName", lambda ns: ns.Dataset.from_tensors(np.int32(42)).scan(
    np.int32(0), lambda x, y: (y, y), name="scan"))

SUITE.checkpoint("ScanCheckpointTest.test", lambda ns: ns.Dataset.from_tensors(np.int32(1))
                 .repeat(10).scan(initial_state=np.array([0, 1], np.int32),
                                  scan_func=lambda a, _: ([a[1], a[0] + a[1]], a[1])))

SUITE.skip("testSparseCount", "SparseTensor: feedline has no sparse tensors")
for name in ("testTensorArraySimple", "testTensorArrayWithCondReset",
             "testTensorArrayWithCondResetByExternalCaptureBreaks"):
    SUITE.skip(name, "TensorArray state (TF graph type)")
SUITE.skip("testChangingStateShape (element_spec)", "static shape invariants of a traced scan "
           "function (unknown rank): feedline's spec is read from elements")
SUITE.skip("testUseDefaultDevice", "GPU device placement")
