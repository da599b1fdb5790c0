"""Port of tensorflow/python/data/kernel_tests/tf_record_dataset_test.py.

The record files are written by the port itself (``tfrecord_bytes``), so neither side's
writer is under test; both read the same bytes.
"""

from __future__ import annotations

import gzip
import os
import pathlib
import zlib

import numpy as np

from tfcases.harness import Suite, derive_sorted, scratch_dir, tfrecord_bytes

SUITE = Suite("tf_record_dataset_test.py")
add = SUITE.add

NUM_FILES, NUM_RECORDS = 2, 7


def _record(f, r):
    return b"Record %d of file %d" % (r, f)


def create_files(compression_type=None):
    folder = scratch_dir()
    names = []
    for i in range(NUM_FILES):
        data = tfrecord_bytes([_record(i, j) for j in range(NUM_RECORDS)])
        if compression_type == "GZIP":
            name = os.path.join(folder, f"tfrecord_{i}.gz")
            with gzip.GzipFile(name, "wb") as f:
                f.write(data)
        else:
            name = os.path.join(folder, f"tf_record.{i}.txt" if not compression_type
                                else f"tfrecord_{i}.z")
            with open(name, "wb") as f:
                f.write(zlib.compress(data) if compression_type == "ZLIB" else data)
        names.append(name)
    return names


def _factory(ns, filenames, compression_type="", num_epochs=1, batch_size=None):
    ds = ns.TFRecordDataset(filenames, compression_type).repeat(num_epochs)
    return ds.batch(batch_size) if batch_size else ds


add("testConstructorErrorsTensorInput[int_list]",
    lambda ns: ns.TFRecordDataset(np.array([1, 2, 3], np.int32)))
add("testConstructorErrorsTensorInput[object]", lambda ns: ns.TFRecordDataset(object()))
add("testReadOneEpoch[file_0]", lambda ns: _factory(ns, create_files()[0]))
add("testReadOneEpoch[file_1]", lambda ns: _factory(ns, create_files()[1]))
add("testReadOneEpoch[both_files]", lambda ns: _factory(ns, create_files()))
add("testReadTenEpochs", lambda ns: _factory(ns, create_files(), num_epochs=10))
add("testReadTenEpochsOfBatches", lambda ns: _factory(ns, create_files(), num_epochs=10,
                                                      batch_size=NUM_RECORDS))
add("testReadZlibFiles", lambda ns: _factory(ns, create_files("ZLIB"), compression_type="ZLIB"))
add("testReadGzipFiles", lambda ns: _factory(ns, create_files("GZIP"), compression_type="GZIP"))
add("testReadWithBuffer", lambda ns: ns.TFRecordDataset(create_files(), buffer_size=2**20))
add("testReadFromDatasetOfFiles", lambda ns: ns.TFRecordDataset(
    ns.Dataset.from_tensor_slices(create_files())))
add("testReadTenEpochsFromDatasetOfFilesInParallel", lambda ns: ns.TFRecordDataset(
    ns.Dataset.from_tensor_slices(create_files()).repeat(10), num_parallel_reads=4),
    derive=derive_sorted)
add("testPathlib", lambda ns: ns.TFRecordDataset([pathlib.Path(create_files()[0])]),
    derive=derive_sorted)
add("testName", lambda ns: ns.TFRecordDataset([create_files()[0]], name="tf_record_dataset"),
    derive=derive_sorted)


def _checkpoint_ds(ns, num_epochs, batch_size=1, compression_type=None, buffer_size=None):
    return ns.TFRecordDataset(create_files(compression_type), compression_type,
                              buffer_size=buffer_size).repeat(num_epochs).batch(batch_size)


for batch_size in (1, 5):
    SUITE.checkpoint(f"TFRecordDatasetCheckpointTest.testBatchSize[batch_size={batch_size}]",
                     lambda ns, b=batch_size: _checkpoint_ds(ns, 5, batch_size=b))
for buffer_size in (0, 5):
    SUITE.checkpoint(f"TFRecordDatasetCheckpointTest.testBufferSize[buffer_size={buffer_size}]",
                     lambda ns, b=buffer_size: _checkpoint_ds(ns, 5, buffer_size=b))
for compression in (None, "GZIP", "ZLIB"):
    SUITE.checkpoint(f"TFRecordDatasetCheckpointTest.testCompressionTypes"
                     f"[compression_type={compression}]",
                     lambda ns, c=compression: _checkpoint_ds(ns, 5, compression_type=c))

SUITE.skip("testConstructorErrorsTensorInput[int32 tensor]", "a tf.constant argument (the "
           "NumPy array case is ported)")
