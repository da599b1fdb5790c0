"""Port of tensorflow/python/data/kernel_tests/fixed_length_record_dataset_test.py."""

from __future__ import annotations

import gzip
import os
import pathlib
import zlib

from tfcases.harness import Suite, derive_sorted, scratch_dir

SUITE = Suite("fixed_length_record_dataset_test.py")
add = SUITE.add

NUM_FILES, NUM_RECORDS, HEADER, RECORD, FOOTER = 2, 7, 5, 3, 2


def _record(f, r):
    return str(f * 2 + r).encode() * RECORD


def create_files(compression_type=None):
    folder = scratch_dir()
    names = []
    for i in range(NUM_FILES):
        name = os.path.join(folder, f"fixed_length_record.{i}.txt")
        names.append(name)
        contents = b"H" * HEADER + b"".join(_record(i, j) for j in range(NUM_RECORDS)) \
            + b"F" * FOOTER
        if compression_type == "GZIP":
            with gzip.GzipFile(name, "wb") as f:
                f.write(contents)
        else:
            with open(name, "wb") as f:
                f.write(zlib.compress(contents) if compression_type == "ZLIB" else contents)
    return names


def _reader(ns, files, epochs=1, batch_size=None, compression_type=None):
    ds = ns.FixedLengthRecordDataset(files, RECORD, HEADER, FOOTER,
                                     compression_type=compression_type).repeat(epochs)
    return ds.batch(batch_size) if batch_size else ds


for test, compression in (("testFixedLengthRecordDatasetNoCompression", None),
                          ("testFixedLengthRecordDatasetGzipCompression", "GZIP"),
                          ("testFixedLengthRecordDatasetZlibCompression", "ZLIB")):
    for name, pick, epochs, batch in (("file_0", [0], 1, None), ("file_1", [1], 1, None),
                                      ("both_files", [0, 1], 1, None),
                                      ("ten_epochs", [0, 1], 10, None),
                                      ("ten_epochs_batched", [0, 1], 10, NUM_RECORDS)):
        add(f"{test}[{name}]", lambda ns, c=compression, pick=pick, e=epochs, b=batch: _reader(
            ns, [create_files(c)[k] for k in pick], e, b, c))

add("testFixedLengthRecordDatasetBuffering", lambda ns: ns.FixedLengthRecordDataset(
    create_files(), RECORD, HEADER, FOOTER, buffer_size=10))
add("testFixedLengthRecordDatasetParallelRead", lambda ns: ns.FixedLengthRecordDataset(
    create_files(), RECORD, HEADER, FOOTER, buffer_size=10, num_parallel_reads=4),
    derive=derive_sorted)
add("testFixedLengthRecordDatasetWrongSize", lambda ns: ns.FixedLengthRecordDataset(
    create_files(), RECORD + 1, HEADER, FOOTER, buffer_size=10))
add("testFixedLengthRecordDatasetPathlib", lambda ns: ns.FixedLengthRecordDataset(
    [pathlib.Path(f) for f in create_files()], RECORD, HEADER, FOOTER, buffer_size=10,
    num_parallel_reads=4), derive=derive_sorted)

SUITE.checkpoint("FixedLengthRecordDatasetCheckpointTest.testFixedLengthRecordCore",
                 lambda ns: ns.FixedLengthRecordDataset(create_files(), RECORD, HEADER,
                                                        FOOTER).repeat(5))
