"""Port of tensorflow/python/data/kernel_tests/batch_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite, attempt, derive_sorted, label, params

SUITE = Suite("batch_test.py")
add = SUITE.add

COMPONENTS = (np.arange(7, dtype=np.int64),
              np.array([[1, 2, 3]], dtype=np.int64) * np.arange(7, dtype=np.int64)[:, None],
              np.array(37.0) * np.arange(7))


def _squares(ns, count, batch_size, drop_remainder, num_parallel_calls):
    return (ns.Dataset.from_tensor_slices(COMPONENTS)
            .map(lambda x, y, z: (ns.square(x), ns.square(y), ns.square(z)))
            .repeat(count)
            .batch(batch_size, drop_remainder, num_parallel_calls))


for p in params(count=[0, 28], batch_size=[14, 15], drop_remainder=[True, False],
                num_parallel_calls=[None, 1, 2, 4]):
    add("testBasic" + label(p), lambda ns, p=p: _squares(ns, **p))
for drop in (True, False):
    # The shapes TF's testBasic asserts, without its map: a Python function's output shapes
    # are known to TF from tracing, to feedline from the first element (see SKIPPED.md).
    add(f"testBasic[element_spec_without_map,drop_remainder={drop}]",
        lambda ns, drop=drop: ns.spec(ns.Dataset.from_tensor_slices(COMPONENTS).repeat(28)
                                      .batch(14, drop)), mode="value")

add("testInvalidBatchSize", lambda ns: ns.Dataset.range(10).batch(0))


def _shape_error(ns):
    def gen():
        yield np.array([1.0, 2.0, 3.0], np.float32)
        yield np.array([4.0, 5.0, 6.0], np.float32)
        yield np.array([7.0, 8.0, 9.0, 10.0], np.float32)
    return ns.from_generator(gen, ns.TensorSpec([None], np.float32)).batch(3)


add("testShapeError", _shape_error)
add("testNoneComponent", lambda ns: ns.Dataset.range(10).map(lambda x: (x, None)).batch(10)
    .map(lambda x, y: x))


def _determinism(ns, local_determinism, global_determinism):
    def map_fn(x):
        return ns.cond(ns.equal(x, 0), lambda: ns.sleep_then(x, 0.02), lambda: x)
    ds = ns.Dataset.from_tensor_slices(np.arange(100, dtype=np.int64))
    ds = ds.map(map_fn, num_parallel_calls=2, deterministic=local_determinism)
    ds = ds.batch(6, num_parallel_calls=2, deterministic=local_determinism).unbatch()
    return ds.with_options(ns.options(deterministic=global_determinism))


for p in params(local_determinism=[None, True, False], global_determinism=[True, False]):
    expect = p["local_determinism"] or (p["local_determinism"] is None
                                        and p["global_determinism"])
    # Without determinism only the multiset is defined.
    add("testDeterminismConfiguration" + label(p), lambda ns, p=p: _determinism(ns, **p),
        derive=None if expect else derive_sorted)

for npc in (None, 1):
    add(f"testName[num_parallel_calls={npc}]",
        lambda ns, npc=npc: ns.Dataset.range(5).batch(5, num_parallel_calls=npc, name="batch"))


def _checkpoint_ds(ns, multiplier=15.0, tensor_slice_len=8, batch_size=2):
    n = np.arange(tensor_slice_len, dtype=np.int64)
    components = (n, np.array([[1, 2, 3]], dtype=np.int64) * n[:, None],
                  np.array(multiplier) * n)
    return ns.Dataset.from_tensor_slices(components).batch(batch_size)


SUITE.checkpoint("BatchCheckpointTest.test", _checkpoint_ds)

# ------------------------------------------------------------------ random access
for index in (-1, 2, 3, 4):
    add(f"BatchRandomAccessTest.testInvalidIndex[index={index}]",
        lambda ns, index=index: ns.at(
            ns.Dataset.from_tensor_slices(np.array([1, 2, 3, 4], np.int32)).batch(2), index),
        mode="value")
add("BatchRandomAccessTest.testEmptyDataset",
    lambda ns: ns.at(ns.Dataset.from_tensor_slices(np.array([], np.float32)).batch(2), 0),
    mode="value")


def _random_access(ns, count, batch_size, drop_remainder):
    ds = ns.Dataset.from_tensor_slices(np.arange(count, dtype=np.int32)).batch(
        batch_size=batch_size, drop_remainder=drop_remainder)
    n = count // batch_size + (0 if drop_remainder or count % batch_size == 0 else 1)
    return [attempt(ns, lambda i=i: ns.at(ds, i)) for i in range(n + 1)]


for p in params(count=[0, 10, 20, 30, 40, 50], batch_size=[1, 3, 5, 7, 10, 20],
                drop_remainder=[True, False]):
    add("BatchRandomAccessTest.testBasic" + label(p),
        lambda ns, p=p: _random_access(ns, **p), mode="value")

# Datasets as batched elements (issue 43's regression): batched, mapped, unbatched, flattened.
add("testDataset", lambda ns: ns.Dataset.range(10).map(lambda i: ns.Dataset.from_tensors(i))
    .batch(5).map(lambda x: x).unbatch().flat_map(lambda x: x))
SUITE.skip("testBasic (element_spec after map)", "static shapes of a Python function's "
           "output: TF traces it into a graph, feedline's element_spec reads the first element "
           "(the spec is checked without the map)")
for name in ("testSparse", "testSparseWithDifferentDenseShapes", "testSparseNested",
             "BatchCheckpointTest.testSparse", "BatchCheckpointTest.testNestedSparse"):
    SUITE.skip(name, "SparseTensor: feedline has no sparse tensors")
for name in ("testRagged", "testRaggedWithDifferentShapes", "testRaggedNested"):
    SUITE.skip(name, "RaggedTensor: feedline has no ragged batching")
SUITE.skip("testCheckpointLargeBatches", "tf.train.Checkpoint of a 512 MB prefetch buffer "
           "(TF checkpoint manager)")
SUITE.skip("BatchRandomAccessTest.testRandomAccessBatchWithShuffle",
           "random access through shuffle(): feedline's shuffle is a streaming buffer "
           "(global_shuffle is its random-access shuffle); the order is TF's RNG")
