"""Port of tensorflow/python/data/kernel_tests/text_line_dataset_test.py."""

from __future__ import annotations

import gc
import gzip
import os
import pathlib
import zlib

from tfcases.harness import Suite, derive_sorted, plain, scratch_dir, to_numpy

SUITE = Suite("text_line_dataset_test.py")
add = SUITE.add


def _line(f, line):
    return b"%d: %d" % (f, line)


def create_files(num_files, num_lines, crlf=False, compression_type=None):
    """TF's _createFiles: file 0 ends with a newline, the others do not."""
    folder = scratch_dir()
    names = []
    for i in range(num_files):
        name = os.path.join(folder, f"text_line.{i}.txt")
        names.append(name)
        parts = []
        for j in range(num_lines):
            parts.append(_line(i, j))
            if j + 1 != num_lines or i == 0:
                parts.append(b"\r\n" if crlf else b"\n")
        contents = b"".join(parts)
        if compression_type == "GZIP":
            with gzip.GzipFile(name, "wb") as f:
                f.write(contents)
        else:
            with open(name, "wb") as f:
                f.write(zlib.compress(contents) if compression_type == "ZLIB" else contents)
    return names


def _text(ns, files, compression, epochs, batch_size=None):
    ds = ns.TextLineDataset(files, compression_type=compression).repeat(epochs)
    return ds.batch(batch_size) if batch_size else ds


for compression in (None, "GZIP", "ZLIB"):
    tag = f"[compression_type={compression}]"
    for name, pick, epochs, batch in (("file_0", [0], 1, None), ("file_1", [1], 1, None),
                                      ("both_files", [0, 1], 1, None),
                                      ("ten_epochs", [0, 1], 10, None),
                                      ("ten_epochs_batched", [0, 1], 10, 5)):
        add(f"testTextLineDataset{tag}[{name}]",
            lambda ns, c=compression, pick=pick, e=epochs, b=batch: _text(
                ns, [create_files(2, 5, crlf=True, compression_type=c)[k] for k in pick],
                c, e, b))

add("testTextLineDatasetParallelRead", lambda ns: ns.TextLineDataset(
    ns.Dataset.from_tensor_slices(create_files(10, 10)).repeat(10), num_parallel_reads=4),
    derive=derive_sorted)
add("testTextLineDatasetBuffering", lambda ns: ns.TextLineDataset(
    create_files(2, 5, crlf=True), buffer_size=10))


def _open_in_this_process(path):
    """Whether this process holds ``path`` open (Linux /proc; TF's test asks psutil)."""
    fd_dir = "/proc/self/fd"
    for fd in os.listdir(fd_dir):
        try:
            if os.readlink(os.path.join(fd_dir, fd)) == path:
                return True
        except OSError:
            continue
    return False


def _cleanup(ns):
    name = os.path.join(scratch_dir(), "text.txt")
    with open(name, "w") as f:
        f.writelines("%d\n" % i for i in range(3))
    first, second = ns.open(ns.TextLineDataset(name)), ns.open(ns.TextLineDataset(name))
    third = ns.open(ns.TextLineDataset(name).repeat().batch(16))
    out = [plain(to_numpy(next(first), ns.is_dataset, ns.read_all)),
           plain(to_numpy(next(second), ns.is_dataset, ns.read_all)),
           list(next(third).shape)]
    ns.close(first)
    ns.close(second)
    ns.close(third)
    del first, second, third
    gc.collect()
    return out, _open_in_this_process(name)


add("testIteratorResourceCleanup", _cleanup, mode="value")
add("testTextLineDatasetPathlib", lambda ns: ns.TextLineDataset(
    [pathlib.Path(f) for f in create_files(1, 5)]))

for compression in (None, "GZIP", "ZLIB"):
    SUITE.checkpoint(f"TextLineDatasetCheckpointTest.testTextLineCore"
                     f"[compression_type={compression}]",
                     lambda ns, c=compression: ns.TextLineDataset(
                         create_files(5, 5, crlf=True, compression_type=c), compression_type=c,
                         buffer_size=10))
