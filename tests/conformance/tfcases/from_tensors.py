"""Port of tensorflow/python/data/kernel_tests/from_tensors_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("from_tensors_test.py")
add = SUITE.add

COMPONENTS = (np.array(1), np.array([1, 2, 3]), np.array(37.0))
add("testFromTensors", lambda ns: ns.Dataset.from_tensors(COMPONENTS))
add("testFromTensors[element_spec]", lambda ns: ns.spec(ns.Dataset.from_tensors(COMPONENTS)),
    mode="value")

NESTED = (np.array([1, 2, 3], dtype=np.int64), (np.array([4.0, 5.0]), np.array([6.0, 7.0])),
          np.array([8, 9, 10], dtype=np.int64))


def _stages(ns):
    """The pipeline of testNestedStructure, stage by stage."""
    ds = ns.Dataset.from_tensors(NESTED)
    out = {"from_tensors": ds}
    ds = out["shuffle"] = ds.shuffle(10, 10)
    ds = out["repeat"] = ds.repeat(-1)
    ds = out["filter"] = ds.filter(lambda x, y, z: True)
    ds = out["take"] = ds.take(5)
    ds = out["map"] = ds.map(lambda x, y, z: ((x, z), (y[0], y[1])))
    ds = out["flat_map"] = ds.flat_map(
        lambda x, y: ns.Dataset.from_tensors(((x[0], x[1]), (y[0], y[1]))))
    out["batch"] = ds.batch(32)
    return out


for stage in ("from_tensors", "shuffle", "repeat", "filter", "take", "map", "flat_map", "batch"):
    add(f"testNestedStructure[element_spec,{stage}]",
        lambda ns, s=stage: ns.spec(_stages(ns)[s]), mode="value")
add("testNestedStructure[element_spec,from_tensor_slices]", lambda ns: ns.spec(
    ns.Dataset.from_tensor_slices((np.array([1, 2, 3], dtype=np.int64),
                                   (np.array([4.0, 5.0, 6.0]), np.array([7.0, 8.0, 9.0])),
                                   np.array([10, 11, 12], dtype=np.int64)))), mode="value")
add("testSkipEagerNestedStructure", lambda ns: ns.Dataset.from_tensors(NESTED)
    .map(lambda x, y, z: ((x, z), (y[0], y[1])))
    .flat_map(lambda x, y: ns.Dataset.from_tensors(((x[0], x[1]), (y[0], y[1])))).batch(32))

# TF's literals {"aa": 1, "ab": [2.0, 2.0]} are int32 and float32: the port says so.
NESTED_DICT = {"a": {"aa": np.int32(1), "ab": np.array([2.0, 2.0], np.float32)},
               "b": np.array([3, 3, 3], np.int32)}
add("testNestedDict", lambda ns: ns.Dataset.from_tensors(NESTED_DICT))
add("testNestedDict[element_spec]", lambda ns: ns.spec(ns.Dataset.from_tensors(NESTED_DICT)),
    mode="value")


def _non_sequence(ns):
    components = np.array([1, 2, 3], dtype=np.int64)
    return (ns.Dataset.from_tensors(components)
            .filter(lambda x: ns.reduce_all(ns.equal(x, components)))
            .map(lambda x: ns.stack([x, x]))
            .flat_map(lambda x: ns.Dataset.from_tensor_slices(x)))


add("testNonSequenceNestedStructure", _non_sequence)
add("testNonSequenceNestedStructure[element_spec]", lambda ns: ns.spec(_non_sequence(ns)),
    mode="value")

for name in ("testSkipEagerFromTensorsSparse", "testFromTensorsMixed"):
    SUITE.skip(name, "SparseTensor: feedline has no sparse tensors")
SUITE.skip("testSkipEagerSplitPipelineFailsWithPlacementError", "TF resource variables on two "
           "devices (graph-mode session)")
