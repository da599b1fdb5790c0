"""Random access to TFRecord files: an index of record offsets, built once per file.

Reading record ``i`` of a TFRecord file needs its byte offset, which only a scan of the
framing can find (each record starts with its length). :func:`load_index` scans a file once
-- reading only the 12-byte headers, checking each length's CRC -- and keeps the offsets
(``int64``, plus the end of the file) in feedline's cache folder, never beside the data:
``$FEEDLINE_CACHE_DIR/indexes``, by default ``$XDG_CACHE_HOME/feedline/indexes``
(``~/.cache/feedline/indexes``), one file per data file, named by a digest of its path.
A user's data folders are only ever read (an index written there would be read as data by
the next ``list_files(folder + "/*")``). Where the cache folder cannot be written, indexes
live in this process's memory.

An index records the data file's size and modification time and a CRC32C of itself: one
that is stale or damaged (its CRC) is rebuilt, never trusted; one whose CRC holds but whose
offsets do not describe the data file (not starting at 0, a record shorter than its
framing, or not ending at the file's size -- a shortened index would hide records) is a
:class:`~feedline.core.errors.DataLossError` naming both files.

:class:`TFRecordRandomReader` then reads any record with one positioned read (``os.pread``
on local files, kept open; fsspec ranges elsewhere) and checks both CRCs, as the sequential
reader does. Compressed files have no random access (a record's position in the compressed
stream cannot be known without decompressing everything before it).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fsspec
import numpy as np

from feedline.core.errors import DataLossError
from feedline.core.random_access import RandomAccessReader
from feedline.formats.compression_hint import file_compression_hint
from feedline.formats.tfrecord_crc import MASK_DELTA, crc32c, masked_crc32c

INDEX_SUFFIX = ".flidx"
_MAGIC = b"FLTFRIDX"
_VERSION = 1
_PREAMBLE = struct.Struct("<8sIQQQ")  # magic, version, file size, mtime_ns, records
_FOOTER = struct.Struct("<I")  # CRC32C of everything before it
_HEADER = struct.Struct("<QI")
_HEADER_SIZE, _FOOTER_SIZE = 12, 4

try:  # the optional C fast path (setup.py); FEEDLINE_PURE_PYTHON=1 ignores a built one
    if os.environ.get("FEEDLINE_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError
    from feedline.formats import _tfrecord_fast as _FAST
except ImportError:
    _FAST = None
# Headers are parsed from reads of this size: one system call covers many small records.
_SCAN_CHUNK = 1 << 20
# Index files bigger than this many bytes of TFRecord show a progress bar while building.
PROGRESS_BYTES = 1 << 30


def cache_dir() -> Path:
    """The folder indexes are kept in: ``$FEEDLINE_CACHE_DIR/indexes``, by default under the
    XDG cache folder (``$XDG_CACHE_HOME/feedline/indexes``, ``~/.cache/feedline/indexes``).

    Example:
        >>> cache_dir().name
        'indexes'
    """
    root = os.environ.get("FEEDLINE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "feedline")
    return Path(root) / "indexes"


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _local_path(path: str) -> str:
    return path.removeprefix("file://")


def _file_identity(path: str) -> tuple[int, int]:
    """Size and modification time (ns) of a file, local or fsspec."""
    if _is_local(path):
        stat = os.stat(_local_path(path))
        return stat.st_size, stat.st_mtime_ns
    fs, inner = fsspec.core.url_to_fs(path)
    info = fs.info(inner)
    modified = info.get("mtime") or info.get("LastModified") or info.get("created") or 0
    if hasattr(modified, "timestamp"):
        modified = modified.timestamp()
    return int(info["size"]), int(float(modified) * 1e9)


def index_path(path: str) -> str:
    """Where the index of data file ``path`` is kept: the cache folder (:func:`cache_dir`),
    under a digest of the file's absolute path or URL (the file's size and modification
    time are inside it, checked on every use).

    Example:
        >>> import os
        >>> name = os.path.basename(index_path("/data/a.tfrecord"))
        >>> name.endswith("-a.tfrecord.flidx"), index_path("/data/a.tfrecord").startswith("/data")
        (True, False)
    """
    key = os.path.abspath(_local_path(path)) if _is_local(path) else path
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return str(cache_dir() / f"{digest}-{os.path.basename(path.rstrip('/'))}{INDEX_SUFFIX}")


_MEMORY: dict[tuple[str, int, int], np.ndarray] = {}
"""Indexes of this process that the cache folder could not take: (file, size, mtime) ->
offsets."""
_MEMORY_LOCK = threading.Lock()


def _encode(offsets: np.ndarray, size: int, mtime_ns: int) -> bytes:
    body = _PREAMBLE.pack(_MAGIC, _VERSION, size, mtime_ns, len(offsets) - 1) + \
        offsets.astype("<i8").tobytes()
    return body + _FOOTER.pack(crc32c(body))


def _decode(data: bytes, size: int, mtime_ns: int, path: str = "<data file>",
            location: str = "<index>") -> np.ndarray | None:
    """The offsets in an index file, or ``None`` if it is damaged, stale or for another
    version (it is then rebuilt).

    Raises:
        DataLossError: The index checks out (CRC, size, time) but its offsets do not
            describe ``path``: they must start at 0, step by at least a record's framing
            (16 bytes) and end at the file's size.
    """
    if len(data) < _PREAMBLE.size + 8 + _FOOTER.size:
        return None
    body, (crc,) = data[:-_FOOTER.size], _FOOTER.unpack(data[-_FOOTER.size:])
    if crc32c(body) != crc:
        return None
    magic, version, saved_size, saved_mtime, records = _PREAMBLE.unpack_from(body)
    if (magic != _MAGIC or version != _VERSION or saved_size != size
            or saved_mtime != mtime_ns or len(body) != _PREAMBLE.size + 8 * (records + 1)):
        return None
    offsets = np.frombuffer(body, dtype="<i8", offset=_PREAMBLE.size).astype(np.int64)
    problem = _offsets_problem(offsets, size)
    if problem:
        raise DataLossError(
            f"{location}: the record index of {path} does not describe it: {problem}; "
            "delete the index to have it rebuilt", path=location)
    return offsets


def _offsets_problem(offsets: np.ndarray, size: int) -> str:
    """What is wrong with ``offsets`` as the record starts (and end) of a file of ``size``
    bytes; empty if nothing."""
    if offsets[0] != 0:
        return f"expected the first record at byte 0, found {int(offsets[0])}"
    if offsets[-1] != size:
        return (f"expected the last record to end at the file's size, {size} bytes, found "
                f"{int(offsets[-1])} ({len(offsets) - 1} records)")
    steps = np.diff(offsets)
    short = np.flatnonzero(steps < _HEADER_SIZE + _FOOTER_SIZE)
    if short.size:
        at = int(short[0])
        return (f"expected record {at} (at byte {int(offsets[at])}) to span at least "
                f"{_HEADER_SIZE + _FOOTER_SIZE} bytes (its framing), found {int(steps[at])}")
    return ""


def scan_offsets(path: str, size: int) -> np.ndarray:
    """Start offsets of every record of ``path``, then the file's end.

    Raises:
        DataLossError: A length fails its CRC, or the file ends inside a record.

    Example:
        >>> import feedline as fl
        >>> _ = fl.write_tfrecord(fl.Dataset.from_tensor_slices([b"ab", b"c"]), "memory://doc/ix.tfrecord")
        >>> scan_offsets("memory://doc/ix.tfrecord", 35).tolist()
        [0, 18, 35]
    """
    offsets: list[int] = []
    with fsspec.open(path, "rb") as file:
        position, buffer, buffer_start = 0, b"", 0
        while position < size:
            if position + _HEADER_SIZE > buffer_start + len(buffer):
                file.seek(position)
                buffer, buffer_start = file.read(_SCAN_CHUNK), position
                if len(buffer) < _HEADER_SIZE:
                    raise _damaged(path, position, len(offsets),
                        f"truncated record at {position} in {path} (record index "
                        f"{len(offsets)}): the file ends {size - position} bytes into a "
                        "record header")
            at = position - buffer_start
            length, length_crc = _HEADER.unpack_from(buffer, at)
            if masked_crc32c(buffer[at:at + 8]) != length_crc:
                raise _damaged(path, position, len(offsets),
                    f"corrupted record at {position} in {path} (record index {len(offsets)}): "
                    "the length's checksum does not match")
            end = position + _HEADER_SIZE + length + _FOOTER_SIZE
            if end > size:
                raise _damaged(path, position, len(offsets),
                    f"truncated record at {position} in {path} (record index {len(offsets)}): "
                    f"the record needs {end - position} bytes, the file has "
                    f"{size - position} left")
            offsets.append(position)
            position = end
    offsets.append(size)
    return np.asarray(offsets, dtype=np.int64)


def _damaged(path: str, position: int, index: int, message: str) -> DataLossError:
    """The error for damage at ``position``; damage from the first byte says whether the file
    looks compressed (read without ``compression_type``)."""
    hint = file_compression_hint(path) if position == 0 else ""
    return DataLossError(f"{message}; {hint}" if hint else message, path=path, offset=position,
                         record_index=index)


def _write_atomically(target: str, data: bytes) -> bool:
    """Write ``data`` to ``target`` through a temporary file and a rename; False if the
    folder cannot be written."""
    folder = os.path.dirname(target) or "."
    try:
        os.makedirs(folder, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".flidx-", dir=folder)
    except OSError:
        return False
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, target)
        return True
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        return False


def load_index(path: str) -> np.ndarray:
    """Record offsets of ``path`` (and its end), from its index, built when missing or stale.

    The index is kept in the cache folder (:func:`index_path`), or in memory where that
    cannot be written; nothing is written beside ``path``.

    Raises:
        DataLossError: The data file is damaged (a length's CRC, a truncated record), or a
            checked-out index does not describe it (see :func:`_decode`).

    Example:
        >>> import feedline as fl, tempfile, os
        >>> folder = tempfile.mkdtemp()
        >>> path = os.path.join(folder, "a.tfrecord")
        >>> _ = fl.write_tfrecord(fl.Dataset.from_tensor_slices([b"ab", b"c"]), path)
        >>> load_index(path).tolist(), os.listdir(folder)
        ([0, 18, 35], ['a.tfrecord'])
    """
    size, mtime_ns = _file_identity(path)
    location = index_path(path)
    with _MEMORY_LOCK:
        offsets = _MEMORY.get((location, size, mtime_ns))
    if offsets is not None:
        return offsets
    try:
        with open(location, "rb") as saved:
            data = saved.read()
    except OSError:
        data = b""
    offsets = _decode(data, size, mtime_ns, path, location)
    if offsets is not None:
        return offsets
    offsets = scan_offsets(path, size)
    if not _write_atomically(location, _encode(offsets, size, mtime_ns)):
        with _MEMORY_LOCK:
            _MEMORY[(location, size, mtime_ns)] = offsets
    return offsets


def load_indexes(paths: Sequence[str], progress: bool | None = None) -> list[np.ndarray]:
    """The indexes of several files, with a progress bar when building them takes long.

    ``progress=None`` shows the bar when the files total more than :data:`PROGRESS_BYTES`.
    """
    if progress is None:
        progress = len(paths) > 1 and sum(
            _file_identity(p)[0] for p in paths) > PROGRESS_BYTES
    if not progress:
        return [load_index(path) for path in paths]
    from tqdm.auto import tqdm

    return [load_index(path) for path in tqdm(paths, desc="feedline: indexing TFRecord files",
                                               unit="file")]


class _MappedFile:
    """A local file mapped read-only (reading a record is then one copy, no system call).

    Touching a mapped page past the end of a file that shrank since it was mapped kills
    the process (SIGBUS), so every read first checks that the file still has its size.
    """

    __slots__ = ("fd", "map", "size")

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        try:
            self.size = os.fstat(self.fd).st_size
            self.map = mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ) if self.size else b""
        except BaseException:
            os.close(self.fd)
            raise

    def shrank(self) -> bool:
        return os.fstat(self.fd).st_size < self.size

    def close(self) -> None:
        if isinstance(self.map, mmap.mmap):
            self.map.close()
        os.close(self.fd)


class TFRecordRandomReader(RandomAccessReader):
    """Record ``i`` of a list of uncompressed TFRecord files, in file order.

    Example:
        >>> import feedline as fl, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "r.tfrecord")
        >>> _ = fl.write_tfrecord(fl.Dataset.from_tensor_slices([b"a", b"bb", b"c"]), path)
        >>> with TFRecordRandomReader([path]) as reader:
        ...     len(reader), reader.get(1), reader.get_many([2, 0])
        (3, b'bb', [b'c', b'a'])
    """

    def __init__(self, paths: Sequence[str]) -> None:
        super().__init__()
        self._paths = list(paths)
        offsets = load_indexes(self._paths)
        counts = np.array([len(o) - 1 for o in offsets], dtype=np.int64)
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self._length = int(self._starts[-1])
        # Every file's offsets end to end: record g of file f spans bounds[g + f] to
        # bounds[g + f + 1], so a whole list of records is located with two fancy indexings.
        self._bounds = np.concatenate(offsets) if offsets else np.zeros(0, np.int64)
        self._files: dict[int, Any] = {}
        self._maps: tuple[mmap.mmap, ...] | None = None
        self._lock = threading.Lock()
        self._closed = False

    def __len__(self) -> int:
        return self._length

    def _handle(self, file_index: int) -> Any:
        handle = self._files.get(file_index)
        if handle is None:
            with self._lock:
                if self._closed:
                    raise ValueError("the TFRecord reader is closed")
                handle = self._files.get(file_index)
                if handle is None:
                    path = self._paths[file_index]
                    if _is_local(path):
                        handle = _MappedFile(_local_path(path))
                    else:
                        handle = fsspec.core.url_to_fs(path)
                    self._files[file_index] = handle
        return handle

    def _all_mapped(self) -> bool:
        """Whether every file is local and mapped (the C path then reads them all)."""
        if self._maps is None:
            handles = [self._handle(i) for i in range(len(self._paths))]
            if not all(type(h) is _MappedFile and isinstance(h.map, mmap.mmap)
                       for h in handles):
                self._maps = ()
            else:
                self._maps = tuple(h.map for h in handles)
        return bool(self._maps)

    def get(self, index: int) -> bytes:
        return self.get_many([index])[0]

    def get_many(self, indices: Sequence[int]) -> list[bytes]:
        positions = np.asarray(indices, dtype=np.int64)
        files = np.searchsorted(self._starts, positions, side="right") - 1
        at = positions + files
        starts, ends = self._bounds[at].tolist(), self._bounds[at + 1].tolist()
        handle_of, handles = self._handle, self._files
        file_list = files.tolist()
        for file_index in set(file_list):
            handle = handle_of(file_index)
            if type(handle) is _MappedFile and handle.shrank():
                first = file_list.index(file_index)
                index = int(positions[first])
                raise DataLossError(
                    f"truncated record at {starts[first]} in {self._paths[file_index]} "
                    f"(record index {index - int(self._starts[file_index])}, element {index}): "
                    "the file changed since it was indexed", path=self._paths[file_index],
                    offset=starts[first], record_index=index - int(self._starts[file_index]))
        records: list[bytes] = []
        if _FAST is not None and self._all_mapped():
            records, bad = _FAST.read_records(self._maps, files, self._bounds[at],
                                              self._bounds[at + 1])
            if bad < 0:
                return records
            # From the record that does not check out, Python reads and names the damage.
            file_list, starts, ends = file_list[bad:], starts[bad:], ends[bad:]
        append, unpack, crc_of = records.append, _HEADER.unpack_from, crc32c
        # One loop, checks inlined: this is the whole cost of a shuffled read.
        for file_index, start, end in zip(file_list, starts, ends):
            handle = handles[file_index]
            if type(handle) is _MappedFile:
                frame = handle.map[start:end]
            else:
                fs, inner = handle
                frame = fs.cat_file(inner, start, end)
            data_end = end - start - _FOOTER_SIZE
            if len(frame) != end - start:  # the file shrank since it was indexed
                index = int(positions[len(records)])
                raise self._damage(file_index, index - int(self._starts[file_index]), index,
                                   start, frame, end)
            length, length_crc = unpack(frame)
            crc = crc_of(frame[:8])
            data = frame[_HEADER_SIZE:data_end]
            data_crc = crc_of(data)
            if (length != data_end - _HEADER_SIZE
                    or (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF != length_crc
                    or (((data_crc >> 15) | (data_crc << 17)) + MASK_DELTA) & 0xFFFFFFFF
                    != int.from_bytes(frame[data_end:], "little")):
                index = int(positions[len(records)])
                raise self._damage(file_index, index - int(self._starts[file_index]), index,
                                   start, frame, end)
            append(data)
        return records

    def _damage(self, file_index: int, local: int, index: int, start: int, frame: bytes,
                end: int) -> DataLossError:
        """The error for a record whose frame does not check out."""
        path = self._paths[file_index]
        where = f"in {path} (record index {local}, element {index})"
        if len(frame) != end - start:
            return DataLossError(
                f"truncated record at {start} {where}: the file changed since it was "
                "indexed", path=path, offset=start, record_index=local)
        length, length_crc = _HEADER.unpack_from(frame)
        if length != end - start - _HEADER_SIZE - _FOOTER_SIZE or \
                masked_crc32c(frame[:8]) != length_crc:
            return DataLossError(
                f"corrupted record at {start} {where}: the length does not match the index "
                "or its checksum", path=path, offset=start, record_index=local)
        return DataLossError(
            f"corrupted record at {start + _HEADER_SIZE} {where}: the data's checksum does "
            "not match", path=path, offset=start + _HEADER_SIZE, record_index=local)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            files, self._files = self._files, {}
            self._maps = ()
        for handle in files.values():
            if isinstance(handle, _MappedFile):
                handle.close()

