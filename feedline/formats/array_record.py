"""ArrayRecord files (Grain's and TFDS's random-access format): read and write.

:class:`ArrayRecordDataset` yields the records of one or more ArrayRecord files as ``bytes``.
It has random access (``len(ds)``, ``ds[i]``, ``global_shuffle``, index-based sharding and
elastic checkpoints), reading a whole list of indices with one call per file, and reads in
order in ranges of records with one call each. :func:`write_array_record` writes a dataset of
``bytes`` as one file.

The format (Riegeli chunks with a footer index) is read by the ``array-record`` package, an
optional dependency (``pip install feedline[array_record]``) imported only when a reader or
writer is made. It reads local files only.

Damaged data is a :class:`~feedline.core.errors.DataLossError` naming the file and the
record index; a file that is not ArrayRecord (or is truncated, so its footer is gone) is one
too, raised when the file is opened.
"""

from __future__ import annotations

import bisect
import errno
import os
import threading
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from feedline.core.dataset import Dataset
from feedline.core.errors import DataLossError
from feedline.core.iterator import IteratorContext
from feedline.core.random_access import RandomAccessReader
from feedline.core.runner import run
from feedline.core.structure import TensorSpec
from feedline.core.validation import validate_optional_int
from feedline.formats._file_reader import FileReaderDataset, RecordCursor
from feedline.formats.files import path_name

__all__ = ["ArrayRecordDataset", "write_array_record"]

#: Records read by one call when reading in order.
DEFAULT_BLOCK_SIZE = 1024
# Random reads of at most this many indices are grouped per file without NumPy.
_FEW = 64
# Options of the C++ reader: a read-ahead buffer pays off in order, not for scattered reads
# (Grain's ArrayRecordDataSource uses the same random-access options).
_SEQUENTIAL_OPTIONS = ""
_RANDOM_OPTIONS = "readahead_buffer_size:0,max_parallelism:0"


def _module() -> Any:
    """``array_record_module``, or an ImportError that says how to install it."""
    try:
        from array_record.python import array_record_module
    except ImportError as error:
        raise ImportError("ArrayRecordDataset needs the array-record package, an optional "
                          "dependency of feedline: pip install feedline[array_record]"
                          ) from error
    return array_record_module


def _local(path: str, reader: str) -> str:
    """``path`` as a local file name (the C++ reader opens nothing else)."""
    if path.startswith("file://"):
        return path.removeprefix("file://")
    if "://" in path:
        raise ValueError(f"{reader}: {path} is not a local file; ArrayRecord files are read "
                         "by the array-record package, which opens local files only (copy "
                         "the file to a local disk first)")
    return path


def open_array_record(path: str, options: str = _RANDOM_OPTIONS,
                      reader: str = "ArrayRecordDataset") -> Any:
    """An open ``ArrayRecordReader`` of ``path``, or a clear error naming the file.

    Raises:
        FileNotFoundError: There is no such file.
        DataLossError: The file is not an ArrayRecord file, or is truncated.

    Example:
        >>> import tempfile, os, feedline as fl
        >>> path = os.path.join(tempfile.mkdtemp(), "r.array_record")
        >>> fl.write_array_record(fl.Dataset.from_tensor_slices([b"a", b"b"]), path)
        2
        >>> handle = open_array_record(path)
        >>> handle.num_records(), handle.read([1])
        (2, [b'b'])
        >>> handle.close()
    """
    module = _module()
    local = _local(path, reader)
    if not os.path.isfile(local):
        raise FileNotFoundError(errno.ENOENT, f"{reader}: no such file", path)
    size = os.path.getsize(local)
    problem = ("its footer and record index cannot be read (a truncated file, or another "
               "format; an ArrayRecord file is at least 64 KiB)")
    try:
        handle = module.ArrayRecordReader(local, options)
    except RuntimeError as error:
        raise DataLossError(f"{reader}: {path} is not a readable ArrayRecord file ({size} "
                            f"bytes): {error}", path=path) from error
    if not handle.ok():
        # The C++ reader reports its status only from close(), if at all.
        try:
            handle.close()
        except RuntimeError as error:
            problem = str(error) or problem
        raise DataLossError(f"{reader}: {path} is not a readable ArrayRecord file ({size} "
                            f"bytes): {problem}", path=path)
    return handle


def _damage(path: str, index: int, error: BaseException, reader: str) -> DataLossError:
    return DataLossError(f"{reader}: cannot read record {index} of {path}: {error}",
                         path=path, record_index=index)


def _read_list(handle: Any, indices: list[int], path: str, reader: str) -> list[bytes]:
    """Records ``indices`` of one open file in one call; on damage, the first bad one named."""
    try:
        return handle.read(indices)
    except RuntimeError as error:
        for index in indices:  # rare: find which record it is, to name it
            try:
                handle.read([index])
            except RuntimeError as single:
                raise _damage(path, index, single, reader) from single
        raise _damage(path, indices[0], error, reader) from error


class ArrayRecordDataset(FileReaderDataset):
    """The records of one or more ArrayRecord files, as ``bytes`` elements.

    Args:
        filenames: A local path, a list of them, or a :class:`~feedline.Dataset` of them.
        block_size: Records read by one call when reading in order (default 1024).
        num_parallel_reads: ``None`` reads the files one after the other; a number ``n``
            reads ``n`` files at once and interleaves their records one by one, as
            ``TFRecordDataset`` does.
        name: Name of this stage in statistics and errors.

    Given a list of names (and no ``num_parallel_reads``), the dataset has random access:
    ``len(ds)`` and ``ds[i]`` work (record ``i`` counting through the files in order), and
    ``global_shuffle`` permutes indices, reading each batch of shuffled indices with one call
    per file. Checkpoints store the file index and the index of the next record.

    Example:
        >>> import feedline as fl, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "data.array_record")
        >>> fl.write_array_record(fl.Dataset.from_tensor_slices([b"a", b"b", b"c"]), path)
        3
        >>> ds = fl.ArrayRecordDataset(path)
        >>> list(ds), len(ds), ds[-1]
        ([b'a', b'b', b'c'], 3, b'c')
        >>> sorted(ds.global_shuffle(seed=1))
        [b'a', b'b', b'c']
    """

    READER: ClassVar[str] = "ArrayRecordDataset"

    def __init__(self, filenames: Any, block_size: int | None = None,
                 num_parallel_reads: int | None = None, name: str | None = None) -> None:
        _module()
        block_size = validate_optional_int(block_size, f"{self.READER}(block_size)", minimum=1,
                                           hint="None or a positive integer")
        self.block_size = DEFAULT_BLOCK_SIZE if block_size is None else block_size
        self.name = name or "array_record"
        self._setup(filenames, num_parallel_reads, {"block_size": self.block_size})

    def _element_spec(self) -> TensorSpec:
        return TensorSpec((), np.dtype(object))

    @property
    def _start(self) -> dict[str, Any]:
        return {"record_index": 0}

    def _open(self, path: str, position: dict[str, Any]) -> RecordCursor:
        return _ArrayRecordCursor(path, int(position["record_index"]), self.block_size,
                                  self.READER)

    def _offers_random_access(self) -> bool:
        # Records of a dataset of names, or of parallel reads, come in a run-time order.
        return self.filenames is not None and self.num_parallel_reads is None

    def _no_random_access_reason(self) -> str:
        return ("ArrayRecordDataset has random access when given a list of file names, "
                "without num_parallel_reads")

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        if not self._offers_random_access():
            raise TypeError(f"{self.READER}: {self._no_random_access_reason()}")
        assert self.filenames is not None
        return ArrayRecordRandomReader(self.filenames, self.READER)


class _ArrayRecordCursor(RecordCursor):
    """One file read in order, ``block_size`` records per call."""

    def __init__(self, path: str, index: int, block_size: int, reader: str) -> None:
        self._path, self._reader = path, reader
        self._handle = open_array_record(path, _SEQUENTIAL_OPTIONS, reader)
        self._count = self._handle.num_records()
        self._index = index  # of the next record handed out
        self._block: list[bytes] = []
        self._taken = 0  # records of _block handed out
        self._block_size = block_size
        self._pending: DataLossError | None = None  # damage found ahead of _index

    def _fill(self) -> None:
        """Read the next block; at damage, the good records before it, then the error."""
        start = self._index
        if self._pending is not None:
            raise self._pending
        if start >= self._count:
            raise StopIteration
        end = min(self._count, start + self._block_size)
        try:
            block = self._handle.read(start, end)
        except RuntimeError:
            # Rare: read the range record by record, so that every good record before the
            # damage is handed out and the error names the damaged one.
            block = []
            for index in range(start, end):
                try:
                    block += self._handle.read([index])
                except RuntimeError as error:
                    self._pending = _damage(self._path, index, error, self._reader)
                    break
            if not block:
                raise self._pending from None
        self._block, self._taken = block, 0

    def read(self) -> bytes:
        if self._taken >= len(self._block):
            self._fill()
        record = self._block[self._taken]
        self._taken += 1
        self._index += 1
        return record

    def read_many(self, limit: int) -> list[bytes]:
        taken = self._taken
        out = self._block[taken:taken + limit]
        self._taken += len(out)
        self._index += len(out)
        return out

    def position(self) -> dict[str, Any]:
        return {"record_index": self._index}

    def close(self) -> None:
        self._block = []
        self._handle.close()


class ArrayRecordRandomReader(RandomAccessReader):
    """Record ``i`` of a list of ArrayRecord files, counting through the files in order.

    Every file is opened when the reader is made (its record count is in its footer); a
    list of indices is read with one call per file it touches. The C++ reader is safe to
    call from several threads at once.

    Example:
        >>> import feedline as fl, tempfile, os
        >>> folder = tempfile.mkdtemp()
        >>> paths = [os.path.join(folder, f"{k}.array_record") for k in range(2)]
        >>> for k, path in enumerate(paths):
        ...     _ = fl.write_array_record(fl.Dataset.from_tensor_slices([b"%d" % k] * 2), path)
        >>> with ArrayRecordRandomReader(paths) as reader:
        ...     len(reader), reader.get(2), reader.get_many([3, 0])
        (4, b'1', [b'1', b'0'])
    """

    def __init__(self, paths: Sequence[str], reader: str = "ArrayRecordDataset") -> None:
        super().__init__()
        self._paths = list(paths)
        self._reader = reader
        self._lock = threading.Lock()
        self._handles: list[Any] = []
        try:
            for path in self._paths:
                self._handles.append(open_array_record(path, _RANDOM_OPTIONS, reader))
        except BaseException:
            self.close()
            raise
        counts = np.array([h.num_records() for h in self._handles], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._start_list: list[int] = self._starts.tolist()
        self._length = int(self._starts[-1])

    def __len__(self) -> int:
        return self._length

    def get(self, index: int) -> bytes:
        return self.get_many([index])[0]

    def get_many(self, indices: Sequence[int]) -> list[bytes]:
        handles = self._handles
        if not handles and self._paths:
            raise ValueError(f"{self._reader}: the random-access reader is closed")
        positions = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(handles) == 1:
            return _read_list(handles[0], positions.tolist(), self._paths[0], self._reader)
        if len(positions) <= _FEW:
            return self._get_few(positions.tolist())
        files = np.searchsorted(self._starts, positions, side="right") - 1
        local = positions - self._starts[files]
        out: list[Any] = [None] * len(positions)
        # One call per file touched, each with that file's indices in the requested order.
        order = np.argsort(files, kind="stable")
        sorted_files = files[order]
        bounds = np.flatnonzero(np.diff(sorted_files)) + 1
        for group in np.split(order, bounds):
            if not len(group):
                continue
            file_index = int(files[group[0]])
            records = _read_list(handles[file_index], local[group].tolist(),
                                 self._paths[file_index], self._reader)
            for slot, record in zip(group.tolist(), records, strict=True):
                out[slot] = record
        return out

    def _get_few(self, positions: list[int]) -> list[Any]:
        """``get_many`` of a few indices, grouped per file in plain Python: global_shuffle
        reads a few records a call (its chunks target 0.2 ms), where NumPy's grouping cost
        100 us a call, more than the reads (2x fewer records/s on the datasets benchmark)."""
        starts = self._start_list
        groups: dict[int, list[int]] = {}
        for slot, position in enumerate(positions):
            groups.setdefault(bisect.bisect_right(starts, position) - 1, []).append(slot)
        out: list[Any] = [None] * len(positions)
        for file_index, slots in groups.items():
            records = _read_list(self._handles[file_index],
                                 [positions[s] - starts[file_index] for s in slots],
                                 self._paths[file_index], self._reader)
            for slot, record in zip(slots, records, strict=True):
                out[slot] = record
        return out

    def close(self) -> None:
        with self._lock:
            handles, self._handles = self._handles, []
        for handle in handles:
            handle.close()


def _as_bytes(value: Any, index: int) -> bytes:
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"write_array_record: a record must be bytes; element {index} is "
                    f"{type(value).__name__}")


def write_array_record(dataset: Dataset, path: Any, options: str = "group_size:1") -> int:
    """Write every element of ``dataset`` (scalar ``bytes``) as a record of one ArrayRecord
    file.

    Args:
        dataset: A dataset of ``bytes`` (or ``str``, written as UTF-8, or 0-d object arrays
            holding them).
        path: A local path.
        options: The writer's options (the array-record package's syntax); the default
            ``group_size:1`` (one record per chunk) makes random reads fastest, as Grain
            recommends.

    Returns:
        The number of records written.

    Example:
        >>> import feedline as fl, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "out.array_record")
        >>> fl.write_array_record(fl.Dataset.from_tensor_slices([b"x", b"y"]), path)
        2
        >>> list(fl.ArrayRecordDataset(path))
        [b'x', b'y']
    """
    if not isinstance(dataset, Dataset):
        raise TypeError(f"write_array_record() needs a Dataset; found {type(dataset).__name__}")
    module = _module()
    local = _local(path_name(path), "write_array_record")
    count = 0
    with run(dataset) as iterator:
        try:
            writer = module.ArrayRecordWriter(local, options)
            if not writer.ok():
                writer.close()  # raises the reason
                raise RuntimeError("the writer failed")
        except (RuntimeError, ValueError) as error:
            raise OSError(errno.EIO, f"write_array_record: cannot open the file for writing "
                          f"with options {options!r}: {error}", local) from error
        try:
            for element in iterator:
                writer.write(_as_bytes(element, count))
                count += 1
        finally:
            writer.close()
    return count
