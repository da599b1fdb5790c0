"""TFRecord files: read (:class:`TFRecordDataset`) and write (:class:`TFRecordWriter`,
:func:`write_tfrecord`) without TensorFlow, byte for byte as TensorFlow does.

A TFRecord file is a sequence of records, each framed as::

    uint64 length            (little endian)
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)

where ``masked_crc32c(x) = ((crc >> 15 | crc << 17) + 0xa282ead8) mod 2**32`` of the CRC32C of
``x``. Both checksums are verified in C (:mod:`feedline.core.checksum`); framing is parsed from
large buffered reads, never from one small read per record.

Damaged files raise :class:`~feedline.core.errors.DataLossError` with TensorFlow's messages
(``"corrupted record at 28"``, ``"truncated record at 332"``) plus the file and the index of the
record, only after every good record before the damage was returned. The offset is the one
TensorFlow reports: the record's start for a bad length checksum or a truncated record, the
start of its data for a bad data checksum. The next ``next()`` continues with the next file,
so ``ignore_errors()`` skips the rest of a damaged file. Unlike TensorFlow, a file ending in a
partial record header (1 to 11 stray bytes) is reported as truncated rather than silently
treated as a clean end: those bytes are a record that was lost.
"""

from __future__ import annotations

import collections
import os
import struct
from typing import IO, Any, Self

import numpy as np

from feedline.core.constants import AUTOTUNE
from feedline.core.dataset import Dataset
from feedline.core.errors import DataLossError
from feedline.core.iterator import IteratorContext
from feedline.core.random_access import RandomAccessReader
from feedline.core.runner import run
from feedline.core.structure import TensorSpec
from feedline.core.validation import validate_optional_int
from feedline.formats._file_reader import ChunkedReader, FileReaderDataset, RecordCursor
from feedline.formats.compression_hint import file_compression_hint
from feedline.formats.files import compression_name, open_file, path_name
from feedline.formats.tfrecord_crc import masked_crc32c

__all__ = ["TFRecordDataset", "TFRecordWriter", "masked_crc32c", "write_tfrecord"]

try:  # the optional C framer (setup.py); FEEDLINE_PURE_PYTHON=1 ignores a built one
    if os.environ.get("FEEDLINE_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError
    from feedline.formats._tfrecord_fast import frame_records as _FRAMER
    from feedline.formats._tfrecord_fast import read_frames as _READ_FRAMES
except ImportError:
    _FRAMER = _READ_FRAMES = None

FRAMED_AT_ONCE = 256
"""Records the C framer takes from the read buffer per call."""
_AHEAD_BYTES = 1 << 20
"""Bytes of file the C reader takes per call at most (a one-record read keeps the rest in a
deque): a call on 50 kB images returns ~20 of them, not 256 (12 MB) ahead."""


_HEADER = struct.Struct("<QI")  # length, masked CRC of the length
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_HEADER_SIZE = 12
_FOOTER_SIZE = 4

#: Bytes read from a file at a time unless ``buffer_size`` says otherwise.
DEFAULT_BUFFER_SIZE = 1 << 20
# No single read asks for more than this (a longer record is read on in parts), so a damaged
# (huge) length never makes the reader allocate much more than the file actually holds.
_MAX_READ = 1 << 24


# ---------------------------------------------------------------------------------- reading
class _FileReader(ChunkedReader, RecordCursor):
    """Reads the records of one file from large buffered chunks, checking both CRCs.

    A damaged record ends the file (``recoverable`` is false): framing cannot be trusted
    after it, so the reader goes on with the next file, as tf.data does.

    A local uncompressed file is read by the C reader (``read_frames``) with ``pread`` on
    its descriptor: small records are framed out of large reads into one reusable store,
    large ones go from the kernel straight into their ``bytes`` objects. Whatever it cannot
    hand out whole and intact (the end of the file, damage, a read error) it leaves to the
    one-record Python path below, which reads it again and reports it: one code for errors.
    """

    def __init__(self, path: str, compression: str, chunk_size: int, offset: int = 0,
                 record_index: int = 0) -> None:
        super().__init__(path, compression, chunk_size, offset)
        self.record_index = record_index
        # Records the C framer took from the buffer ahead of the consumer, and their bytes
        # on file: the position handed out is the buffer's minus those.
        self._ahead: collections.deque[bytes] = collections.deque()
        self._ahead_bytes = 0
        self._store: bytearray | None = None  # the buffer an uncompressed file is read into
        self._fd = self._local_descriptor()

    def _local_descriptor(self) -> int | None:
        """The descriptor the C reader reads with ``pread``, or None (no extension, a
        compressed stream, a file object without one, e.g. fsspec's remote files)."""
        if _READ_FRAMES is None or self.compressed or not self._seekable:
            return None
        try:
            fd = self._file.fileno()  # type: ignore[union-attr]
        except (AttributeError, OSError, ValueError):
            return None
        if not isinstance(fd, int) or fd < 0:
            return None
        self._store = bytearray(max(self._chunk, 16))
        return fd

    def close(self) -> None:
        self._fd = None
        super().close()

    @property
    def offset(self) -> int:
        return self._base + self._pos - self._ahead_bytes

    def _frame(self, limit: int) -> list[bytes]:
        """Up to ``limit`` next records the C code can hand out whole and intact ([] when the
        next one needs the Python path)."""
        fd = self._fd
        if fd is None:
            if _FRAMER is None:
                return []
            records, self._pos = _FRAMER(self._buffer, self._pos, limit)
            return records
        store = self._store
        assert store is not None
        valid = len(self._buffer)  # the buffer is empty or a view of the store's start
        records, self._pos, valid, file_pos = _READ_FRAMES(
            fd, store, self._pos, valid, self._base + valid, limit, _AHEAD_BYTES)
        self._buffer = memoryview(store)[:valid]
        self._base = file_pos - valid
        return records

    def _fill(self, needed: int) -> bool:
        """Make ``needed`` bytes available from ``self._pos``; False if the file ends first."""
        available = len(self._buffer) - self._pos
        if available >= needed:
            return True
        if self._fd is not None:
            # The C reader reads with pread: the file object has not moved since it last read.
            assert self._file is not None
            self._file.seek(self._base + len(self._buffer))
        leftover = bytes(self._buffer[self._pos:])  # a copy: the buffer is reused below
        parts = [leftover]
        self._base += self._pos
        self._pos = 0
        try:
            if not self.compressed:
                # Read straight behind the partial record kept: joining it with a chunk
                # read apart copied every byte once more (11 us a 30 kB record).
                self._buffer = self._read_behind(leftover, needed)
                return len(self._buffer) >= needed
            while available < needed:
                chunk = self._read(min(max(self._chunk, needed - available), _MAX_READ))
                if not chunk:
                    break
                parts.append(chunk)
                available += len(chunk)
        except DataLossError as error:
            raise DataLossError(
                f"{error} (while reading record index {self.record_index})",
                path=self.path, offset=error.offset, record_index=self.record_index) from error
        finally:
            if self.compressed:
                self._buffer = b"".join(parts)
        return available >= needed

    def _read_behind(self, leftover: bytes, needed: int) -> memoryview:
        """``leftover`` followed by what the file holds next: at least ``needed`` bytes in
        all unless the file ends, read into this reader's one reusable buffer (framed
        records are copies, so nothing else refers to it).

        The buffer is never made larger than what the file can still hold, so a damaged
        (checksummed) length does not allocate what is not there; a record longer than one
        bounded read (16 MiB) is read on in parts as the file delivers them.
        """
        assert self._file is not None
        kept = len(leftover)
        ahead = min(max(self._chunk, needed - kept), _MAX_READ)
        if needed - kept > self._chunk:  # a long record: only then is the size worth a seek
            remaining = self._remaining()
            if remaining is not None:
                ahead = min(ahead, remaining)
        size = kept + ahead
        store = self._store
        if store is None or len(store) < size:
            store = self._store = bytearray(size)
        view = memoryview(store)
        view[:kept] = leftover
        got = kept
        while got < needed:
            count = self._file.readinto(view[got:size])
            if not count:
                break
            got += count
        if got < needed and got == size:
            return self._read_on(view[:got], needed)
        return view[:got]

    def _remaining(self) -> int | None:
        """Bytes of the file after what was read so far (``None``: unknown)."""
        assert self._file is not None
        end = self.size()
        if end is None:
            return None
        try:
            return max(0, end - self._file.tell())
        except (OSError, ValueError):
            return None

    def _read_on(self, start: memoryview, needed: int) -> memoryview:
        """``start`` (a full bounded read) and the rest of a record longer than one read:
        pieces of at most 16 MiB, each as long as the file delivers, joined at the end."""
        assert self._file is not None
        parts = [bytes(start)]
        got = len(start)
        while got < needed:
            part = self._file.read(min(needed - got, _MAX_READ))
            if not part:
                break
            parts.append(part)
            got += len(part)
        if self._fd is None:
            return memoryview(b"".join(parts))
        # The C reader frames out of the store's start: the record goes there.
        store = self._store = bytearray().join(parts)
        return memoryview(store)

    def _damage(self, kind: str, offset: int, detail: str) -> DataLossError:
        if offset == 0 and not self.compressed:
            # Damaged from its first byte: most often a compressed file read as uncompressed.
            hint = file_compression_hint(self.path)
            detail = f"{detail}; {hint}" if hint else detail
        return DataLossError(
            f"{kind} record at {offset} in {self.path} (record index {self.record_index}): "
            f"{detail}", path=self.path, offset=offset, record_index=self.record_index)

    def position(self) -> dict[str, int]:
        return {"offset": self.offset, "record_index": self.record_index}

    def read_many(self, limit: int) -> list[bytes]:
        ahead = self._ahead
        if not ahead:
            records = self._frame(limit)
        elif len(ahead) <= limit:
            records = list(ahead)
            ahead.clear()
            self._ahead_bytes = 0
        else:
            records = [ahead.popleft() for _ in range(limit)]
            self._ahead_bytes -= sum(map(len, records)) + len(records) * (
                _HEADER_SIZE + _FOOTER_SIZE)
        self.record_index += len(records)
        return records

    def read(self) -> bytes:
        """The next record; ``StopIteration`` at a clean end of file; DataLossError on damage."""
        ahead = self._ahead
        if ahead:
            data = ahead.popleft()
            self._ahead_bytes -= len(data) + _HEADER_SIZE + _FOOTER_SIZE
            self.record_index += 1
            return data
        # Frame the intact records ahead in one C call (0.1 µs a record, not 1.5): what it
        # stops at (the file's end, damage) is the one-record path's below.
        records = self._frame(FRAMED_AT_ONCE)
        if records:
            data = records[0]
            if len(records) > 1:
                ahead.extend(records)
                ahead.popleft()
                self._ahead_bytes = sum(map(len, ahead)) + len(ahead) * (
                    _HEADER_SIZE + _FOOTER_SIZE)
            self.record_index += 1
            return data
        buffer, pos = self._buffer, self._pos
        if len(buffer) - pos < _HEADER_SIZE:
            if not self._fill(_HEADER_SIZE):
                if self._pos == len(self._buffer):
                    raise StopIteration
                start = self.offset
                raise self._damage(
                    "truncated", start,
                    f"the file ends {len(self._buffer) - self._pos} bytes into a "
                    f"{_HEADER_SIZE}-byte record header")
            buffer, pos = self._buffer, self._pos
        length, length_crc = _HEADER.unpack_from(buffer, pos)
        if masked_crc32c(buffer[pos:pos + 8]) != length_crc:
            raise self._damage("corrupted", self._base + pos,
                               "the checksum of the record length does not match")
        end = pos + _HEADER_SIZE + length + _FOOTER_SIZE
        if end > len(buffer):
            start = self._base + pos
            if not self._fill(_HEADER_SIZE + length + _FOOTER_SIZE):
                raise self._damage(
                    "truncated", start,
                    f"the record needs {_HEADER_SIZE + length + _FOOTER_SIZE} bytes but the "
                    f"file ends after {len(self._buffer) - self._pos}")
            buffer, pos = self._buffer, self._pos
            end = pos + _HEADER_SIZE + length + _FOOTER_SIZE
        data = bytes(buffer[pos + _HEADER_SIZE:end - _FOOTER_SIZE])  # from a bytearray too
        if masked_crc32c(data) != _CRC.unpack_from(buffer, end - _FOOTER_SIZE)[0]:
            raise self._damage("corrupted", self._base + pos + _HEADER_SIZE,
                               "the checksum of the record data does not match")
        self._pos = end
        self.record_index += 1
        return data


class TFRecordDataset(FileReaderDataset):
    """The records of one or more TFRecord files, as ``bytes`` elements.

    Args:
        filenames: A path or fsspec URL, a list of them, or a :class:`Dataset` of them
            (``str`` or ``bytes`` elements, e.g. from ``Dataset.list_files``).
        compression_type: ``None``/``""``, ``"GZIP"`` or ``"ZLIB"``.
        buffer_size: Bytes read from a file at a time (default 1 MiB); 0 reads only what
            each record needs.
        num_parallel_reads: ``None`` reads the files one after the other. A number ``n`` (or
            ``AUTOTUNE``) reads ``n`` files at once and interleaves their records one by one,
            as ``filenames.interleave(TFRecordDataset, cycle_length=n, block_length=1,
            num_parallel_calls=n)`` would (tf.data's order).
        name: Name of this stage in statistics and errors.

    Checkpoints store the file index, the byte offset of the next record and its record
    index. Restoring an uncompressed file seeks to the offset; a compressed file cannot seek,
    so restoring it decompresses and drops the bytes before the offset.

    Example:
        >>> import feedline as fl
        >>> with fl.TFRecordWriter("memory://doc/tfrecord/a.tfrecord") as writer:
        ...     for record in [b"first", b"second"]:
        ...         writer.write(record)
        >>> list(fl.TFRecordDataset("memory://doc/tfrecord/a.tfrecord"))
        [b'first', b'second']
    """

    READER = "TFRecordDataset"

    def __init__(self, filenames: Any, compression_type: str | None = None,
                 buffer_size: int | None = None, num_parallel_reads: int | None = None,
                 name: str | None = None) -> None:
        self.compression_type = compression_name(compression_type)
        # tf.data's TFRecordDataset: 0 reads without a buffer, None/AUTOTUNE its default.
        buffer_size = validate_optional_int(
            buffer_size, f"{self.READER}(buffer_size)", minimum=0, special=(AUTOTUNE,),
            hint="None, AUTOTUNE or an integer >= 0")
        self.buffer_size = DEFAULT_BUFFER_SIZE if buffer_size in (None, AUTOTUNE) else buffer_size
        self.name = name or "tfrecord"
        self._setup(filenames, num_parallel_reads,
                    {"compression_type": self.compression_type, "buffer_size": self.buffer_size})

    def _element_spec(self) -> TensorSpec:
        return TensorSpec((), np.dtype(object))

    @property
    def _start(self) -> dict[str, int]:
        return {"offset": 0, "record_index": 0}

    def _open(self, path: str, position: dict[str, Any]) -> RecordCursor:
        return _FileReader(path, self.compression_type, self.buffer_size, position["offset"],
                           position["record_index"])

    def _offers_random_access(self) -> bool:
        # A compressed record's place is unknown without decompressing all before it, and
        # the records of a dataset of names or of parallel reads come in a run-time order.
        return (self.filenames is not None and self.num_parallel_reads is None
                and self.compression_type == "")

    def _random_reader(self, ctx: IteratorContext) -> RandomAccessReader:
        if not self._offers_random_access():
            raise TypeError(
                f"{self.READER}: random access needs uncompressed files given as a list of "
                "names, without num_parallel_reads (this one has "
                f"compression_type={self.compression_type!r}, num_parallel_reads="
                f"{self.num_parallel_reads!r}, names from "
                f"{'a list' if self.filenames is not None else 'a dataset'})")
        # Imported on first use: only random access needs the index (and what it imports).
        from feedline.formats.tfrecord_index import TFRecordRandomReader

        return TFRecordRandomReader(self.filenames)


# ---------------------------------------------------------------------------------- writing
def _as_record(value: Any, where: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, str):
        return value.encode()  # as TensorFlow, which takes a str as its UTF-8 bytes
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"a TFRecord record must be bytes; {where} is {type(value).__name__}")


class TFRecordWriter:
    """Writes records to a TFRecord file, byte-identical to ``tf.io.TFRecordWriter``.

    Args:
        path: Local path or fsspec URL.
        compression_type: ``None``/``""``, ``"GZIP"`` or ``"ZLIB"``.

    Example:
        >>> import feedline as fl
        >>> with fl.TFRecordWriter("memory://doc/tfrecord/w.tfrecord") as writer:
        ...     writer.write(b"a")
        >>> import fsspec
        >>> fsspec.open("memory://doc/tfrecord/w.tfrecord", "rb").open().read().hex()
        '01000000000000000175de4161786ee428'
    """

    def __init__(self, path: Any, compression_type: str | None = None) -> None:
        self.path = path_name(path)
        self._file: IO[bytes] | None = open_file(self.path, "wb",
                                                 compression_name(compression_type))
        self._count = 0

    def write(self, record: bytes) -> None:
        """Append one record (``bytes``; a ``str`` is written as UTF-8)."""
        if self._file is None:
            raise ValueError(f"TFRecordWriter for {self.path} is closed")
        data = _as_record(record, f"record {self._count}")
        length = _LENGTH.pack(len(data))
        self._file.write(length + _CRC.pack(masked_crc32c(length)))
        self._file.write(data)
        self._file.write(_CRC.pack(masked_crc32c(data)))
        self._count += 1

    def flush(self) -> None:
        """Push written records to the file (compressed streams are sync-flushed)."""
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        """Finish the file. Idempotent."""
        if self._file is not None:
            file, self._file = self._file, None
            file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def write_tfrecord(dataset: Dataset, path: Any, compression_type: str | None = None) -> int:
    """Write every element of ``dataset`` (scalar ``bytes``) as a record of one TFRecord file.

    The counterpart of ``tf.data.experimental.TFRecordWriter(path).write(dataset)``.

    Args:
        dataset: A dataset of ``bytes`` (or 0-d object arrays holding bytes).
        path: Local path or fsspec URL.
        compression_type: ``None``/``""``, ``"GZIP"`` or ``"ZLIB"``.

    Returns:
        The number of records written.

    Example:
        >>> import feedline as fl
        >>> ds = fl.Dataset.from_tensor_slices([b"x", b"y", b"z"])
        >>> fl.write_tfrecord(ds, "memory://doc/tfrecord/sink.tfrecord")
        3
        >>> list(fl.TFRecordDataset("memory://doc/tfrecord/sink.tfrecord"))
        [b'x', b'y', b'z']
    """
    if not isinstance(dataset, Dataset):
        raise TypeError(f"write_tfrecord() needs a Dataset; found {type(dataset).__name__}")
    count = 0
    with run(dataset) as iterator, TFRecordWriter(path, compression_type) as writer:
        for element in iterator:
            writer.write(_as_record(element, f"element {count}"))
            count += 1
    return count
