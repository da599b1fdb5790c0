"""What the text, CSV, fixed-length and Parquet readers share.

* :func:`file_names` turns a ``filenames`` argument (a name, a list of names) into a tuple of
  ``str`` paths or fsspec URLs.
* :class:`ChunkedReader` reads one (optionally compressed) file in large chunks and hands out
  lines or fixed-size pieces while tracking the exact byte offset of what it has handed out,
  so a reader's checkpoint is just an offset.
* :class:`FileReaderDataset` / :class:`FileReaderIterator` read the files one after the other
  with a per-format :class:`RecordCursor`, keep ``{file_index, path, position}`` as the
  iterator state, and implement ``num_parallel_reads`` exactly as tf.data does: an
  ``interleave`` of one-file readers with ``cycle_length=num_parallel_reads, block_length=1``.

After a record-level error that leaves the file readable (a bad CSV field) the next ``next()``
continues with the next record; after any other error (a missing file, damaged data) it
continues with the next file, so ``ignore_errors()`` downstream skips just what is broken.
"""

from __future__ import annotations

import abc
import errno
import functools
import io
import os
from collections.abc import Sequence
from typing import IO, Any, ClassVar

import numpy as np

from feedline.core.constants import AUTOTUNE, UNKNOWN
from feedline.core.dataset import Dataset
from feedline.core.iterator import DatasetIterator, IteratorContext, State
from feedline.core.traits import FILE_READER_OF_NAMES, FILE_SOURCE, OperationTraits
from feedline.core.validation import validate_int, validate_parallelism
from feedline.formats.files import compression_name, open_file, path_name

# A compressed stream can only skip forward by decoding; this bounds each decoding step.
_MAX_SKIP = 1 << 24


def file_names(filenames: Any, reader: str) -> tuple[str, ...]:
    """The file names in a ``filenames`` argument that is not a Dataset.

    Example:
        >>> file_names(["a.txt", b"b.txt"], "TextLineDataset")
        ('a.txt', 'b.txt')
    """
    if isinstance(filenames, (str, bytes, np.str_, np.bytes_, os.PathLike)):
        return (path_name(filenames),)
    if isinstance(filenames, np.ndarray):
        if filenames.ndim > 1:
            raise ValueError(f"{reader}: filenames must be a scalar or a vector of file names; "
                             f"found an array of shape {filenames.shape}")
        filenames = filenames.reshape(-1).tolist()
    if isinstance(filenames, Sequence):
        try:
            return tuple(path_name(name) for name in filenames)
        except TypeError as error:
            raise TypeError(f"{reader}: {error}") from None
    raise TypeError(f"{reader}: filenames must be a file name, a list of file names or a "
                    f"Dataset of file names; found {type(filenames).__name__}")


def check_buffer_size(buffer_size: int | None, default: int, reader: str) -> int:
    """``buffer_size`` validated, with ``None``/``0``/``AUTOTUNE`` meaning ``default``.

    Example:
        >>> import numpy as np
        >>> check_buffer_size(np.int64(4096), 1 << 18, "TextLineDataset"), check_buffer_size(None, 7, "r")
        (4096, 7)
    """
    if buffer_size is None:
        return default
    size = validate_int(buffer_size, f"{reader}(buffer_size)", minimum=0, special=(AUTOTUNE,),
                        hint="None, AUTOTUNE or a non-negative integer")
    return default if size in (0, AUTOTUNE) else size


class ChunkedReader:
    """Reads one file in chunks of ``chunk_size`` bytes; hands out lines and fixed-size pieces.

    ``offset`` is always the position, in the decompressed stream, of the next byte to be
    handed out, so it can be stored in a checkpoint and given back to the constructor.
    Uncompressed files seek there; compressed ones decode and drop everything before it.

    Example:
        >>> import fsspec
        >>> fsspec.filesystem("memory").pipe("/doc/chunked.txt", b"ab\\ncd")
        >>> reader = ChunkedReader("memory://doc/chunked.txt", None, 2)
        >>> reader.read_line(), reader.offset, reader.read_line(), reader.read_line()
        (b'ab\\n', 3, b'cd', b'')
        >>> reader.close()
    """

    def __init__(self, path: str, compression: str | None, chunk_size: int,
                 offset: int = 0) -> None:
        self.path = path
        self.compressed = compression_name(compression) != ""
        self._chunk = max(1, chunk_size)
        self._buffer = b""
        self._pos = 0
        self._base = 0  # stream offset of self._buffer[0]
        self._file: IO[bytes] | None = open_file(path, "rb", compression)
        self._seekable = False
        if not self.compressed:
            try:
                self._seekable = self._file.seekable()
            except (OSError, ValueError):
                pass
        if offset:
            self._skip_to(offset)

    @property
    def offset(self) -> int:
        """Offset (in the decompressed stream) of the next byte not yet handed out."""
        return self._base + self._pos

    def size(self) -> int | None:
        """Total size of an uncompressed, seekable file; ``None`` when it cannot be known."""
        if not self._seekable or self._file is None:
            return None
        try:
            current = self._file.tell()
            end = self._file.seek(0, io.SEEK_END)
            self._file.seek(current)
            return end
        except (OSError, ValueError, TypeError):  # fsspec raises TypeError for unknown sizes
            return None

    def close(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            file.close()

    def _skip_to(self, offset: int) -> None:
        assert self._file is not None
        if self._seekable:
            self._file.seek(offset)
            self._base = offset
            return
        # A compressed (or streaming) file cannot seek: read and drop what comes before.
        while self._base < offset:
            skipped = self._read(min(offset - self._base, _MAX_SKIP))
            if not skipped:
                break
            self._base += len(skipped)

    def _read(self, size: int) -> bytes:
        assert self._file is not None
        if self.compressed:
            # read1 decodes at most once, so the data before damaged compressed bytes is
            # handed out (and its records delivered) before the DataLossError.
            return self._file.read1(size)  # type: ignore[attr-defined]
        # Every reader has a file object of its own (open_file copies shared memory:// files),
        # so reads continue where the last one ended.
        return self._file.read(size)

    def read_chunk(self) -> bytes:
        """The bytes not handed out yet from the current chunk, else the next chunk; ``b""``
        at the end of the file."""
        if self._pos < len(self._buffer):
            out = self._buffer[self._pos:]
        else:
            out = self._read(self._chunk)
            self._base += len(out)
        self._base += len(self._buffer)
        self._buffer, self._pos = b"", 0
        return out

    def read_line(self) -> bytes:
        """The next line including its ``\\n`` (absent on a last unterminated line); ``b""``
        at the end of the file."""
        buffer, pos = self._buffer, self._pos
        end = buffer.find(b"\n", pos)
        if end >= 0:
            self._pos = end + 1
            return buffer[pos:end + 1]
        parts = [buffer[pos:]]
        self._base += len(buffer)
        self._buffer, self._pos = b"", 0
        while True:
            chunk = self._read(self._chunk)
            if not chunk:
                return b"".join(parts)
            end = chunk.find(b"\n")
            if end >= 0:
                parts.append(chunk[:end + 1])
                self._buffer, self._pos = chunk, end + 1
                return b"".join(parts)
            parts.append(chunk)
            self._base += len(chunk)

    def read_exact(self, size: int) -> bytes:
        """The next ``size`` bytes; fewer only at the end of the file."""
        buffer, pos = self._buffer, self._pos
        if len(buffer) - pos >= size:
            self._pos = pos + size
            return buffer[pos:pos + size]
        parts = [buffer[pos:]]
        got = len(buffer) - pos
        self._base += len(buffer)
        self._buffer, self._pos = b"", 0
        while got < size:
            chunk = self._read(max(self._chunk, size - got))
            if not chunk:
                break
            need = size - got
            if len(chunk) > need:
                parts.append(chunk[:need])
                self._buffer, self._pos = chunk, need
                break
            parts.append(chunk)
            self._base += len(chunk)
            got += len(chunk)
        return b"".join(parts)


class RecordCursor(abc.ABC):
    """One open file of a reader, positioned between two records.

    ``read()`` returns the next record, raises ``StopIteration`` at the end of the file, or
    raises the error of a damaged record. After an error, ``recoverable`` says whether the
    file can go on (the next ``read()`` returns the record after the bad one); otherwise the
    reader moves on to the next file.
    """

    recoverable: bool = False

    def read_many(self, limit: int) -> list[Any]:
        """Up to ``limit`` next records that can be had without a read or an error ([]
        when the next one needs :meth:`read`): the chunked path of the reader."""
        return []

    @abc.abstractmethod
    def read(self) -> Any:
        """The next record."""

    @abc.abstractmethod
    def position(self) -> dict[str, Any]:
        """JSON-safe position of the next record; the reader's ``open`` accepts it back."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the file."""


class FileReaderDataset(Dataset):
    """Base node of a reader of records from files (a source, or a reader of a name dataset).

    Subclasses call :meth:`_setup` from their constructor and implement :meth:`_open`
    (a cursor at a position) and :attr:`_start` (the position of a file's first record).
    """

    TRAITS = FILE_READER_OF_NAMES

    READER: ClassVar[str] = "reader"
    #: Drop what cannot be read (a bad record, the rest of a damaged file) instead of raising.
    SKIP_ERRORS: ClassVar[bool] = False

    def traits(self) -> OperationTraits:
        """A source when given file names; a reader of names given a dataset of them."""
        return FILE_READER_OF_NAMES if self._inputs else FILE_SOURCE

    def _setup(self, filenames: Any, num_parallel_reads: int | None,
               one_file_kwargs: dict[str, Any]) -> None:
        num_parallel_reads = validate_parallelism(num_parallel_reads,
                                                  f"{self.READER}(num_parallel_reads)")
        self.num_parallel_reads = num_parallel_reads
        self.filenames: tuple[str, ...] | None = None
        if num_parallel_reads is not None:
            # tf.data's num_parallel_reads is exactly this interleave of one-file readers.
            names = filenames if isinstance(filenames, Dataset) else Dataset.from_tensor_slices(
                np.array(file_names(filenames, self.READER), dtype=object))
            read_one = functools.partial(type(self), **one_file_kwargs)
            super().__init__([names.interleave(
                read_one, cycle_length=num_parallel_reads, block_length=1,
                num_parallel_calls=num_parallel_reads, name=self.READER)])
        elif isinstance(filenames, Dataset):
            super().__init__([filenames])
        else:
            super().__init__()
            self.filenames = file_names(filenames, self.READER)

    @property
    @abc.abstractmethod
    def _start(self) -> dict[str, Any]:
        """The position of the first record of a file."""

    @abc.abstractmethod
    def _open(self, path: str, position: dict[str, Any]) -> RecordCursor:
        """A cursor on ``path`` at ``position``."""

    def cardinality(self) -> int:
        if self.num_parallel_reads is None and self.filenames == ():
            return 0
        return UNKNOWN

    def _make_iterator(self, ctx: IteratorContext) -> DatasetIterator:
        if self.num_parallel_reads is not None:
            return self._inputs[0]._make_iterator(ctx)
        names = self._inputs[0]._make_iterator(ctx) if self._inputs else None
        kind = SkippingFileReaderIterator if self.SKIP_ERRORS else FileReaderIterator
        return kind(ctx, self, names)


class FileReaderIterator(DatasetIterator):
    """Reads the files one after the other; the state is ``{file_index, path, position}``
    plus the state of the file-name dataset's iterator under ``input``."""

    def __init__(self, ctx: IteratorContext, node: FileReaderDataset,
                 names: DatasetIterator | None) -> None:
        super().__init__(ctx, [names] if names is not None else [])
        self._node = node
        self._filenames = node.filenames
        self._names = names
        self._file_index = 0  # files finished so far = index of the current file
        self._path: str | None = None  # the current file (open, or to be opened at _position)
        self._position: dict[str, Any] = node._start
        self._cursor: RecordCursor | None = None

    def _next_path(self) -> str | None:
        if self._names is None:
            assert self._filenames is not None
            if self._file_index >= len(self._filenames):
                return None
            return self._filenames[self._file_index]
        try:
            element = next(self._names)
        except StopIteration:
            return None
        try:
            return path_name(element)
        except TypeError as error:
            self._file_index += 1
            raise TypeError(f"{self._node.READER}: file name {self._file_index - 1} of the "
                            f"input dataset is not a string: {error}") from None

    def _end_file(self) -> None:
        """Move past the current file (at its end, or after an error it cannot go on from)."""
        self._release()
        self._path = None
        self._position = self._node._start
        self._file_index += 1

    def _open(self, path: str) -> RecordCursor:
        try:
            return self._node._open(path, self._position)
        except FileNotFoundError as error:
            # Named by its path as given: with num_parallel_reads every file is read by a
            # one-file reader, whose file index (always 0) would say nothing.
            raise FileNotFoundError(
                errno.ENOENT, f"{self._node.READER}: no such file", path) from error
        except OSError as error:
            if path not in str(error):
                error.add_note(f"{self._node.READER}: while opening {path!r}")
            raise

    def __next__(self) -> Any:
        while True:
            cursor = self._cursor
            if cursor is None:
                if self._path is None:
                    path = self._next_path()
                    if path is None:
                        raise StopIteration
                    self._path = path
                try:
                    cursor = self._cursor = self._open(self._path)
                except BaseException:
                    self._end_file()
                    raise
            try:
                return cursor.read()
            except StopIteration:
                self._end_file()
            except BaseException as error:
                if not cursor.recoverable:
                    if isinstance(error, OSError) and self._path and \
                            self._path not in str(error):
                        error.add_note(f"{self._node.READER}: while reading {self._path!r}")
                    self._end_file()
                raise

    def next_chunk(self, limit: int) -> list[Any]:
        cursor = self._cursor
        if cursor is not None:
            records = cursor.read_many(limit)
            if records:
                return records
        records = [self.__next__()]  # opens the next file, reads more of it, or raises
        if limit > 1 and self._cursor is not None:
            records += self._cursor.read_many(limit - 1)
        return records

    def _get_state(self) -> State:
        position = self._cursor.position() if self._cursor is not None else self._position
        return {"file_index": self._file_index, "path": self._path, "position": position,
                "input": self._names.state_dict() if self._names is not None else None}

    def _set_state(self, state: State) -> None:
        self._release()
        self._file_index = state["file_index"]
        self._path = state["path"]
        self._position = state["position"]
        if self._names is not None:
            self._names.load_state_dict(state["input"])
        # The file is reopened at the position by the next __next__.

    def _release(self) -> None:
        if self._cursor is not None:
            cursor, self._cursor = self._cursor, None
            self._position = cursor.position()
            cursor.close()


class SkippingFileReaderIterator(FileReaderIterator):
    """A :class:`FileReaderIterator` that drops what it cannot read and goes on."""

    def __next__(self) -> Any:
        while True:
            try:
                return super().__next__()
            except StopIteration:
                raise
            except Exception:  # noqa: BLE001, S112 - skipping unreadable data is the point
                continue

