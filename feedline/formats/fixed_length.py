"""``FixedLengthRecordDataset``: records of ``record_bytes`` bytes from binary files.

Each file is ``header_bytes`` skipped, then records of ``record_bytes`` bytes, then
``footer_bytes`` skipped. When the body (the file without header and footer) is not a multiple
of ``record_bytes``, the reader raises an error naming the file, the offset of the incomplete
record and its index, where tf.data does and of tf.data's category:

* an uncompressed file's size is known before reading, so the error comes before any record
  of that file: :class:`~feedline.InvalidArgumentError` (tf.data checks the size when it opens
  the file: the file does not fit the arguments);
* a compressed file's size is only known at its end, so every complete record is delivered
  first and the error comes in place of the incomplete one: :class:`~feedline.DataLossError`
  (as tf.data, for which the stream ended in the middle of a record).

Either way the next ``next()`` goes on with the next file.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from feedline.core.errors import DataLossError, InvalidArgumentError
from feedline.core.structure import TensorSpec
from feedline.core.validation import validate_int
from feedline.formats._file_reader import (
    ChunkedReader,
    FileReaderDataset,
    RecordCursor,
    check_buffer_size,
)
from feedline.formats.files import compression_name

__all__ = ["FixedLengthRecordDataset"]

#: Bytes read from a file at a time unless ``buffer_size`` says otherwise (tf.data's 256 KiB).
DEFAULT_BUFFER_SIZE = 256 << 10


def _non_negative(value: Any, name: str, minimum: int = 0) -> int:
    return validate_int(value, f"FixedLengthRecordDataset({name})", minimum=minimum,
                        hint=f"an integer >= {minimum}")


class FixedLengthRecordDataset(FileReaderDataset):
    """One ``bytes`` element per fixed-length record of the files.

    Args:
        filenames: A path or fsspec URL, a list of them, or a :class:`~feedline.Dataset` of
            them.
        record_bytes: Bytes in each record (> 0).
        header_bytes: Bytes to skip at the start of each file.
        footer_bytes: Bytes to skip at the end of each file.
        buffer_size: Bytes read at a time (default 256 KiB).
        compression_type: ``None``/``""``, ``"GZIP"`` or ``"ZLIB"``.
        num_parallel_reads: ``None`` reads the files one after the other; ``n`` (or
            ``AUTOTUNE``) reads ``n`` at once and interleaves their records one by one, as
            tf.data does.

    Checkpoints store the file index and the index of the next record; an uncompressed file
    seeks to ``header_bytes + index * record_bytes``, a compressed one is decoded again from
    its start up to there.

    Example:
        >>> import feedline as fl, fsspec
        >>> fsspec.filesystem("memory").pipe("/doc/fixed/a.bin", b"HEADER012345FOOTER")
        >>> list(fl.FixedLengthRecordDataset("memory://doc/fixed/a.bin", record_bytes=2,
        ...                                  header_bytes=6, footer_bytes=6))
        [b'01', b'23', b'45']
    """

    READER: ClassVar[str] = "FixedLengthRecordDataset"

    def __init__(self, filenames: Any, record_bytes: int, header_bytes: int = 0,
                 footer_bytes: int = 0, buffer_size: int | None = None,
                 compression_type: str | None = None,
                 num_parallel_reads: int | None = None) -> None:
        self.record_bytes = _non_negative(record_bytes, "record_bytes", 1)
        self.header_bytes = _non_negative(header_bytes, "header_bytes")
        self.footer_bytes = _non_negative(footer_bytes, "footer_bytes")
        self.buffer_size = check_buffer_size(buffer_size, DEFAULT_BUFFER_SIZE, self.READER)
        self.compression_type = compression_name(compression_type)
        self._setup(filenames, num_parallel_reads, {
            "record_bytes": self.record_bytes, "header_bytes": self.header_bytes,
            "footer_bytes": self.footer_bytes, "buffer_size": self.buffer_size,
            "compression_type": self.compression_type})

    def _element_spec(self) -> TensorSpec:
        return TensorSpec((), np.dtype(object))

    @property
    def _start(self) -> dict[str, Any]:
        return {"record": 0}

    def _open(self, path: str, position: dict[str, Any]) -> RecordCursor:
        return _FixedLengthCursor(self, path, position["record"])


class _FixedLengthCursor(RecordCursor):
    """Reads records; knows the end from the file size, or (compressed or unknown size) by
    keeping ``footer_bytes`` of look-ahead, since the footer is only known at the end."""

    def __init__(self, node: FixedLengthRecordDataset, path: str, index: int) -> None:
        self._path = path
        self._record = node.record_bytes
        self._header = node.header_bytes
        self._footer = node.footer_bytes
        self._index = index
        self._compressed = bool(node.compression_type)
        self._reader = ChunkedReader(path, node.compression_type, node.buffer_size,
                                     self._header + index * self._record)
        try:
            self._start(index)
        except BaseException:
            self._reader.close()
            raise

    def _start(self, index: int) -> None:
        size = self._reader.size()
        self._limit: int | None = None
        self._lookahead = b""
        if size is not None:
            body = size - self._header - self._footer
            if body < 0:
                raise self._damage(
                    size, 0, f"the file has {size} bytes, fewer than the header "
                    f"({self._header} bytes) and footer ({self._footer} bytes) together")
            if body % self._record:
                complete = body // self._record
                raise self._damage(self._header + complete * self._record, complete,
                                   self._body_message(body))
            self._limit = size - self._footer
            return
        # A stream that cannot seek was decoded up to the requested offset, or to its end.
        expected = self._header + index * self._record
        if self._reader.offset < expected:
            end = self._reader.offset
            if index == 0:
                detail = f"the file has only {end} bytes, but the header alone has {self._header}"
            else:
                detail = (f"the file has only {end} bytes, fewer than the checkpoint's position "
                          f"(record {index} at offset {expected})")
            raise self._damage(end, min(index, max(0, end - self._header) // self._record),
                               detail)
        self._lookahead = self._reader.read_exact(self._footer)
        if len(self._lookahead) < self._footer:
            end = expected + len(self._lookahead)
            raise self._damage(end, index, f"the file has {end} bytes, fewer than the header "
                               f"({self._header} bytes) and footer ({self._footer} bytes) "
                               "together")

    def _body_message(self, body: int) -> str:
        return (f"excluding the header ({self._header} bytes) and footer ({self._footer} "
                f"bytes), the body has {body} bytes, which is not a multiple of the record "
                f"length ({self._record} bytes): record {body // self._record} is incomplete")

    def _damage(self, offset: int, index: int,
                detail: str) -> DataLossError | InvalidArgumentError:
        # tf.data: an uncompressed file whose size does not fit header + k * record + footer
        # is an invalid argument (found from its size, before reading); a compressed stream
        # that ends early is lost data.
        error = DataLossError if self._compressed else InvalidArgumentError
        return error(f"FixedLengthRecordDataset: {self._path}: {detail}",
                     path=self._path, offset=offset, record_index=index)

    def read(self) -> bytes:
        if self._limit is not None:
            if self._reader.offset >= self._limit:
                raise StopIteration
            record = self._reader.read_exact(self._record)
            if len(record) < self._record:  # the file shrank while being read
                raise self._damage(self._reader.offset - len(record), self._index,
                                   "the file ended in the middle of a record")
            self._index += 1
            return record
        data = self._reader.read_exact(self._record)
        if len(data) == self._record:
            if self._footer:
                data = self._lookahead + data
                data, self._lookahead = data[:self._record], data[self._record:]
            self._index += 1
            return data
        if not data:
            raise StopIteration
        start = self._header + self._index * self._record
        body = start + len(data) + len(self._lookahead) - self._header - self._footer
        raise self._damage(start, self._index, self._body_message(body))

    def position(self) -> dict[str, Any]:
        return {"record": self._index}

    def close(self) -> None:
        self._reader.close()

