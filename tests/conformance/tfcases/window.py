"""Port of tensorflow/python/data/kernel_tests/window_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite, label, params

SUITE = Suite("window_test.py")
add = SUITE.add

R7 = np.arange(7, dtype=np.int64)
COMPONENTS = (R7, np.array([[1, 2, 3]], dtype=np.int64) * R7[:, None], np.array(37.0) * R7)


def _window(ns, count, size, shift, stride, drop_remainder):
    return (ns.Dataset.from_tensor_slices(COMPONENTS)
            .map(lambda x, y, z: (ns.square(x), ns.square(y), ns.square(z)))
            .repeat(count)
            .window(size=size, shift=shift, stride=stride, drop_remainder=drop_remainder)
            .flat_map(lambda x, y, z: ns.Dataset.zip((x.batch(batch_size=size),
                                                      y.batch(batch_size=size),
                                                      z.batch(batch_size=size)))))


for p in (params(count=[20], size=[10, 14, 17], shift=[7, 14], stride=[1, 2, 6],
                 drop_remainder=[True, False])
          + params(count=[0, 1], size=[10], shift=[4], stride=[1], drop_remainder=[True, False])):
    add("testWindowDataset" + label(p), lambda ns, p=p: _window(ns, **p))

for size, shift, stride in ((0, 3, 1), (3, 0, 1), (3, 3, 0)):
    add(f"testWindowDatasetInvalid[size={size},shift={shift},stride={stride}]",
        lambda ns, a=size, b=shift, c=stride: ns.Dataset.range(10).map(lambda x: x).repeat(20)
        .window(size=a, shift=b, stride=c).flat_map(lambda x: x.batch(batch_size=a)))

add("testWindowDifferentNestedStructures[tuple]", lambda ns: ns.Dataset.from_tensor_slices(
    (np.array([1, 2], np.int64), np.array([3, 4], np.int64))).window(2))
add("testWindowDifferentNestedStructures[dict]", lambda ns: ns.Dataset.from_tensor_slices(
    {"a": np.array([1, 2], np.int64)}).window(2))


def _shape_error(ns):
    def gen():
        yield np.array([1.0, 2.0, 3.0], np.float32)
        yield np.array([4.0, 5.0, 6.0], np.float32)
        yield np.array([7.0, 8.0, 9.0, 10.0], np.float32)
    return ns.from_generator(gen, ns.TensorSpec([None], np.float32)).window(
        size=3, shift=1).flat_map(lambda x: x.batch(batch_size=3))


add("testWindowShapeError", _shape_error)
add("testWindowIgnoreErrors", lambda ns: ns.Dataset.from_tensor_slices(
    np.array([1.0, np.nan, 2.0, np.nan, 3.0], np.float32))
    .map(lambda x: ns.check_numerics(x, "message"))
    .window(size=2, shift=2, stride=2, drop_remainder=True)
    .flat_map(lambda x: x.batch(batch_size=2)))
add("testNestedOutput", lambda ns: ns.Dataset.zip(
    (ns.Dataset.range(100), ns.Dataset.range(100))).window(10))
add("testDropRemainderOutput", lambda ns: ns.Dataset.range(100)
    .window(30, drop_remainder=True).flat_map(lambda x: x.batch(30)).batch(4))
add("testName", lambda ns: ns.Dataset.from_tensors(np.int32(42)).window(1, name="window")
    .flat_map(lambda x: x))

SUITE.checkpoint("WindowCheckpointTest.test", lambda ns: ns.Dataset.range(42).window(6)
                 .interleave(lambda x: x, cycle_length=2, num_parallel_calls=2))

for name in ("testWindowSparse", "testWindowSparseWithDifferentDenseShapes",
             "testNestedWindowSparse"):
    SUITE.skip(name, "SparseTensor: feedline has no sparse tensors")
