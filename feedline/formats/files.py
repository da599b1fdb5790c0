"""Opening files for the record readers and writers: fsspec paths, optional compression.

Every reader and writer in :mod:`feedline.formats` opens its files through :func:`open_file`, so
that local paths and fsspec URLs (``s3://``, ``gs://``, ``http(s)://``, ``memory://``…) behave
alike and compression is handled in one place, with tf.data's names: ``None``/``""`` (none),
``"GZIP"`` and ``"ZLIB"``.

Damaged compressed data is reported as :class:`~feedline.core.errors.DataLossError` naming the
file and the decompressed byte offset where decoding failed, instead of the assorted
``zlib.error`` / ``gzip.BadGzipFile`` / ``EOFError`` the standard library raises.
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import zlib
from typing import IO, Any

import fsspec
from fsspec.implementations.memory import MemoryFile

from feedline.core.errors import DataLossError

__all__ = ["COMPRESSION_TYPES", "compression_name", "open_file", "path_name"]

#: The compression names accepted everywhere (tf.data's spelling; case-insensitive here).
COMPRESSION_TYPES = ("", "GZIP", "ZLIB")

# Compressed streams are decoded in chunks of this many compressed bytes: large enough that the
# per-call overhead vanishes, small enough that memory stays bounded.
_COMPRESSED_CHUNK = 1 << 20


def compression_name(compression: str | None) -> str:
    """The canonical name of ``compression``: ``""``, ``"GZIP"`` or ``"ZLIB"``.

    Args:
        compression: ``None``, ``""``, ``"GZIP"`` or ``"ZLIB"`` (any letter case).

    Raises:
        ValueError: for any other value.

    Example:
        >>> compression_name(None), compression_name("gzip"), compression_name("ZLIB")
        ('', 'GZIP', 'ZLIB')
    """
    if compression is None:
        return ""
    if isinstance(compression, bytes):
        compression = compression.decode()
    if not isinstance(compression, str) or compression.upper() not in COMPRESSION_TYPES:
        raise ValueError(
            f"compression_type must be None, '', 'GZIP' or 'ZLIB'; found {compression!r}")
    return compression.upper()


def path_name(path: Any) -> str:
    """``path`` as a ``str``: accepts str, bytes, ``os.PathLike`` and NumPy string scalars.

    File-name datasets (``list_files``) yield ``bytes`` elements, like tf.data, so readers that
    take a dataset of names pass each one through here.

    Example:
        >>> import numpy as np
        >>> path_name(b"memory://a.txt"), path_name(np.str_("x/y"))
        ('memory://a.txt', 'x/y')
    """
    if hasattr(path, "ndim") and getattr(path, "ndim", None) == 0 and hasattr(path, "item"):
        path = path.item()
    if isinstance(path, (bytes, bytearray)):
        return os.fsdecode(bytes(path))
    if isinstance(path, str):
        return str(path)
    if isinstance(path, os.PathLike):
        return os.fsdecode(os.fspath(path))
    raise TypeError(f"a file name must be str, bytes or os.PathLike; found {type(path).__name__}")


def open_file(path: Any, mode: str = "rb", compression: str | None = None, *,
              encoding: str = "utf-8", newline: str | None = None,
              **storage_options: Any) -> IO[Any]:
    """Open a local path or fsspec URL, decompressing or compressing on the fly.

    Args:
        path: Local path or fsspec URL (str, bytes or ``os.PathLike``).
        mode: ``"rb"``, ``"wb"``, ``"ab"`` or a text mode ``"rt"``/``"wt"``/``"at"`` (text
            modes wrap the binary stream in :class:`io.TextIOWrapper`).
        compression: ``None``/``""``, ``"GZIP"`` or ``"ZLIB"``. GZIP goes through :mod:`gzip`
            (concatenated members are read as one stream); ZLIB is a streaming
            :func:`zlib.decompressobj` / :func:`zlib.compressobj` (concatenated zlib streams
            are read as one stream too).
        encoding: Text modes only.
        newline: Text modes only, as for :func:`open`.
        **storage_options: Passed to :func:`fsspec.open` (credentials, block sizes…).

    Returns:
        A file object; closing it closes the underlying file as well. Uncompressed files
        opened for reading are seekable; decompressed streams are not (seek forward by
        reading).

    Raises:
        DataLossError: while reading, when compressed data is damaged or truncated.
        FileNotFoundError: when ``path`` does not exist (reading) or is empty.
        OSError: when the file cannot be opened; ``filename`` is ``path`` as given (not the
            absolute path fsspec resolved it to).

    Example:
        >>> with open_file("memory://doc/files.gz", "wb", "GZIP") as f:
        ...     _ = f.write(b"hello\\n" * 3)
        >>> with open_file("memory://doc/files.gz", "rb", "GZIP") as f:
        ...     f.read()
        b'hello\\nhello\\nhello\\n'
    """
    name = path_name(path)
    kind = compression_name(compression)
    if mode not in ("rb", "wb", "ab", "rt", "wt", "at", "r", "w", "a"):
        raise ValueError(f"mode must be one of rb, wb, ab, rt, wt, at; found {mode!r}")
    text = "b" not in mode
    binary_mode = mode[0] + "b"
    if not name:
        # fsspec resolves "" to the working directory, and would report that instead.
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
    try:
        raw = fsspec.open(name, binary_mode, **storage_options).open()
    except OSError as error:
        # Name the file as the user gave it: fsspec reports the path it resolved (absolute,
        # without the protocol), which the user may not recognize.
        if error.errno is None or error.filename in (None, name):
            raise
        raise type(error)(error.errno, error.strerror, name) from error
    if binary_mode == "rb" and isinstance(raw, MemoryFile):
        # fsspec's memory file system hands every opener the same file object, so two
        # readers of one file would move each other's position: give each its own view.
        shared = raw
        raw = io.BytesIO(shared.getbuffer())
        shared.close()
    try:
        stream: IO[bytes]
        if binary_mode == "rb":
            if kind == "":
                stream = raw
            elif kind == "GZIP":
                stream = io.BufferedReader(
                    _CheckedReader(gzip.GzipFile(fileobj=raw, mode="rb"), raw, name),
                    _COMPRESSED_CHUNK)
            else:
                stream = io.BufferedReader(_ZlibReader(raw, name), _COMPRESSED_CHUNK)
        else:
            if kind == "":
                stream = raw
            elif kind == "GZIP":
                # mtime=0 makes the output reproducible (TensorFlow writes 0 there too).
                stream = _OwningGzipWriter(raw)
            else:
                # No BufferedWriter: the compressor buffers already, and BufferedWriter.flush()
                # would not reach our flush() (which makes the data so far decodable).
                stream = _ZlibWriter(raw)
    except BaseException:
        raw.close()
        raise
    if text:
        return io.TextIOWrapper(stream, encoding=encoding, newline=newline)
    return stream


def _data_loss(name: str, offset: int, error: BaseException) -> DataLossError:
    return DataLossError(
        f"{name}: damaged compressed data at decompressed byte {offset}: {error}",
        path=name, offset=offset)


class _CheckedReader(io.RawIOBase):
    """A raw reader over a decompressing file that turns decoding errors into DataLossError."""

    def __init__(self, inner: IO[bytes], raw: IO[bytes], name: str) -> None:
        self._inner = inner
        self._raw = raw
        self._name = name
        self._position = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        try:
            # read1: one decompression step, so the data decoded before damaged or missing
            # compressed bytes is returned before the error is raised by the next call.
            data = self._inner.read1(len(view))
        except (zlib.error, gzip.BadGzipFile, EOFError) as error:
            raise _data_loss(self._name, self._position, error) from error
        count = len(data)
        view[:count] = data
        self._position += count
        return count

    def close(self) -> None:
        if not self.closed:
            try:
                self._inner.close()
            finally:
                self._raw.close()
                super().close()


class _ZlibReader(io.RawIOBase):
    """Streaming ZLIB (RFC 1950) decoder; concatenated streams decode as one."""

    def __init__(self, raw: IO[bytes], name: str) -> None:
        self._raw = raw
        self._name = name
        self._decoder = zlib.decompressobj()
        self._started = False  # whether any compressed byte was fed to a decoder
        self._position = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = len(view)
        if want == 0:
            return 0
        while True:
            decoder = self._decoder
            try:
                if decoder.eof:
                    # A stream ended: what follows it starts the next one. Its first bytes
                    # are the decoder's unused data; CPython may leave the same bytes in its
                    # unconsumed tail too (when the stream ended on a full read), and feeding
                    # that tail again would decode nothing, forever.
                    chunk = decoder.unused_data or self._raw.read(_COMPRESSED_CHUNK)
                    if not chunk:
                        return 0
                    self._decoder = decoder = zlib.decompressobj()
                    data = decoder.decompress(chunk, want)
                elif decoder.unconsumed_tail:
                    # Input held back when the last call filled its output.
                    data = decoder.decompress(decoder.unconsumed_tail, want)
                else:
                    chunk = self._raw.read(_COMPRESSED_CHUNK)
                    if not chunk:
                        if self._started:
                            raise _data_loss(self._name, self._position,
                                             EOFError("the zlib stream ends early"))
                        return 0
                    self._started = True
                    data = decoder.decompress(chunk, want)
            except zlib.error as error:
                raise _data_loss(self._name, self._position, error) from error
            if data:
                count = len(data)
                view[:count] = data
                self._position += count
                return count

    def close(self) -> None:
        if not self.closed:
            try:
                self._raw.close()
            finally:
                super().close()


class _ZlibWriter(io.RawIOBase):
    """Streaming ZLIB (RFC 1950) encoder; ``close`` finishes the stream and closes the file."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._encoder = zlib.compressobj()
        self._finished = False

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self._raw.write(self._encoder.compress(view))
        return view.nbytes

    def flush(self) -> None:
        if not self.closed and not self._finished:
            # A sync flush makes everything written so far decodable by a reader.
            self._raw.write(self._encoder.flush(zlib.Z_SYNC_FLUSH))
            self._raw.flush()

    def close(self) -> None:
        if not self.closed:
            # Finish first: IOBase.close() calls flush(), which must not add a sync block.
            self._finished = True
            try:
                self._raw.write(self._encoder.flush(zlib.Z_FINISH))
            finally:
                self._raw.close()
                super().close()


class _OwningGzipWriter(gzip.GzipFile):
    """A gzip writer that also closes the file object it writes into."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__(fileobj=raw, mode="wb", mtime=0, filename="")
        self._owned = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._owned.close()
