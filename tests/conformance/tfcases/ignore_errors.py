"""Port of tensorflow/python/data/kernel_tests/ignore_errors_test.py."""

from __future__ import annotations

import os

import numpy as np

from tfcases.harness import Suite, scratch_dir, tfrecord_bytes, values

SUITE = Suite("ignore_errors_test.py")
add = SUITE.add

NAN = np.array([1.0, 2.0, 3.0, np.nan, 5.0], np.float32)

add("testMapIgnoreError", lambda ns: ns.Dataset.from_tensor_slices(NAN)
    .map(lambda x: ns.check_numerics(x, "message")).ignore_errors())
add("testIgnoreError_withLogWarning", lambda ns: ns.Dataset.from_tensor_slices(NAN)
    .map(lambda x: ns.check_numerics(x, "message")).ignore_errors(log_warning=True))
add("testParallelMapIgnoreError", lambda ns: ns.Dataset.from_tensor_slices(NAN)
    .map(lambda x: ns.check_numerics(x, "message"), num_parallel_calls=2).prefetch(2)
    .ignore_errors())


def _read_file(ns):
    folder = scratch_dir()
    names = [os.path.join(folder, f"file_{i}.txt") for i in range(5)]
    for name in names:
        with open(name, "w") as f:
            f.write(name)
    ds = ns.Dataset.from_tensor_slices(np.array([n.encode() for n in names], object)) \
        .map(ns.read_file, num_parallel_calls=2).prefetch(2).ignore_errors()
    all_present = [v == n for v, n in zip(values(ns, ds), names)]
    os.remove(names[0])
    one_missing = [v == n for v, n in zip(values(ns, ds), names[1:])]
    return all_present, one_missing


add("testReadFileIgnoreError", _read_file, mode="value")


def _tfrecord(ns):
    folder = scratch_dir()
    names = []
    for i in range(5):
        name = os.path.join(folder, f"tf_record.{i}.txt")
        with open(name, "wb") as f:
            f.write(tfrecord_bytes([b"record"] * 10) + b"corrupted data")
        names.append(name)
    return ns.TFRecordDataset(names).ignore_errors()


add("testTFRecordDatasetIgnoreError", _tfrecord)


def _zip(ns):
    a = ns.Dataset.from_tensor_slices(np.array([1.0, 2.0, 0.0, 4.0], np.float32))
    b = a.map(lambda x: ns.check_numerics(ns.divide(np.float32(1.0), x), "error"))
    return ns.Dataset.zip((b, a)).ignore_errors()


add("testZipIgnoreError", _zip)
add("testCardinality", lambda ns: ns.cardinality(ns.Dataset.range(10).ignore_errors()),
    mode="value")

SUITE.checkpoint("IgnoreErrorsCheckpointTest.test", lambda ns: ns.Dataset.from_tensor_slices(NAN)
                 .map(lambda x: ns.check_numerics(x, "message")).ignore_errors())

SUITE.skip("testIgnoreError_withLogWarning (stderr text)", "the text TF logs to stderr; the "
           "elements are checked")
