"""Port of tensorflow/python/data/kernel_tests/interleave_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite, derive_sorted

SUITE = Suite("interleave_test.py")
add = SUITE.add


def _repeat_interleave(ns, values, cycle_length, block_length, npc, deterministic=None):
    return ns.Dataset.from_tensor_slices(values).repeat(2).interleave(
        lambda x: ns.Dataset.from_tensors(x).repeat(x), cycle_length, block_length, npc,
        deterministic=deterministic)


I456, I406 = [4, 5, 6], [4, 0, 6]
for i, (values, cycle, block, npc) in enumerate([
        (I456, 1, 3, None), (I456, 1, 3, 1), (I456, 2, 1, None), (I456, 2, 1, 1),
        (I456, 2, 1, 2), (I456, 2, 3, None), (I456, 2, 3, 1), (I456, 2, 3, 2),
        (I456, 7, 2, None), (I456, 7, 2, 1), (I456, 7, 2, 3), (I456, 7, 2, 5),
        (I456, 7, 2, 7), ([], 2, 3, None), ([0, 0, 0], 2, 3, None), (I406, 2, 3, None),
        (I406, 2, 3, 1), (I406, 2, 3, 2)], start=1):
    add(f"testInterleaveDataset[{i}:{values},cycle={cycle},block={block},npc={npc}]",
        lambda ns, v=values, c=cycle, b=block, n=npc: _repeat_interleave(
            ns, np.array(v, np.int64), c, b, n))

NAN = np.array([1.0, np.nan, 2.0, np.nan, 3.0], np.float32)
for i, (cycle, block, npc) in enumerate([
        (1, 3, None), (1, 3, 1), (2, 1, None), (2, 1, 1), (2, 1, 2), (2, 3, None),
        (2, 3, 1), (2, 3, 2), (7, 2, None), (7, 2, 1), (7, 2, 3), (7, 2, 5), (7, 2, 7)],
        start=1):
    # Each NaN fails in its place and the iteration goes on.
    add(f"testInterleaveDatasetError[{i}:cycle={cycle},block={block},npc={npc}]",
        lambda ns, c=cycle, b=block, n=npc: ns.Dataset.from_tensor_slices(NAN)
        .map(lambda x: ns.check_numerics(x, "message"))
        .interleave(ns.Dataset.from_tensors, c, b, n), mode="resume")

# TF's sloppy-interleave tests force an order with events in graph-mode sessions; the port
# checks what deterministic=False guarantees for any order: the same multiset.
for name, cases in (("testSkipEagerSloppyInterleaveInOrder",
                     [(I456, 2, 1, 1), (I456, 2, 1, 2), (I456, 2, 3, 1), (I456, 2, 3, 2),
                      (I456, 3, 2, 1), (I456, 3, 2, 2), (I456, 3, 2, 3), (I406, 2, 3, 1),
                      (I406, 2, 3, 2)]),
                    ("testSkipEagerSloppyInterleaveOutOfOrder",
                     [(I456, 2, 1, 2), (I456, 2, 3, 2), (I456, 3, 2, 3), (I406, 2, 3, 2)])):
    for i, (values, cycle, block, npc) in enumerate(cases, start=1):
        add(f"{name}[{i}:{values},cycle={cycle},block={block},npc={npc}]",
            lambda ns, v=values, c=cycle, b=block, n=npc: _repeat_interleave(
                ns, np.array(v, np.int64), c, b, n, deterministic=False)
            .map(lambda x: x * x), derive=derive_sorted)

SUITE.skip("testPythonImplementation", "tests the test's own Python reference interleave")
SUITE.skip("testInterleaveSparse", "SparseTensor: feedline has no sparse tensors")
SUITE.skip("testSkipEagerSloppyInterleave* (forced order)", "threading.Event coordination "
           "of py_funcs in graph-mode sessions; the multiset is checked")
