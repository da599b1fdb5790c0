"""Chunk files: the unit a snapshot or a saved dataset is written, committed and checked in.

A chunk file (format 2) is::

    b"FLCHUNK2"
    u32 header length, u32 CRC32C of the header
    header JSON: compression, elements, structure, uncompressed bytes, and the frames:
                 [packed bytes, raw bytes, elements, CRC32C of the packed bytes] each
    the frames, one after the other, each starting at a multiple of 64 bytes (zeros pad
    the header and each frame but the last), so the arrays of a mapped file are aligned

A *frame* holds consecutive elements (:mod:`feedline.snapshot.codec`), compressed on its
own. An element of :data:`OWN_FRAME_BYTES` or more has a frame to itself, and reading hands
out its arrays as views, never copies (writable, aligned): into the chunk file, mapped
copy-on-write, when it is uncompressed (the page cache itself; the map lives as long as any
view into it), or into the frame's own decompressed buffer (an element then keeps alive no
memory but its own). Smaller elements share frames of about :data:`FRAME_BYTES` and are
copied out when read, so that a few of them held (say in a shuffle buffer) never pin a
frame. Frames compress and decompress independently, on several threads at once (zstd and
lz4 release the GIL; the CRC32C runs at tens of GB/s).

A chunk is written to a temporary name in its folder and renamed into place, so a chunk that
exists is complete (a crash leaves at most a temporary file, never a partial chunk); every
frame's CRC32C and the header's are checked when read, and damage is a
:class:`~feedline.core.errors.DataLossError` naming the file. Format 1 chunks
(``FLCHUNK1``: one frame, one CRC) are still read.

A chunk of a store (:mod:`feedline.snapshot.store`) says whose it is: its header holds the
store's random id (``"store"``), its shard and its number (``"chunk"``), and the store's
manifest lists each chunk's *checksum*, the CRC32C of its header (which lists every frame's
CRC32C, so it vouches for the whole file). Reading a store checks both
(:class:`ChunkIdentity`): a chunk file swapped with another, copied over another, or taken
from another store or another write of the same one is a ``DataLossError`` naming the file,
what was expected and what was found -- never elements in the wrong order, twice or missing.

Compression: ``"ZSTD"`` (the default, level 1), ``"LZ4"`` (the optional ``lz4`` package),
``"GZIP"``, ``"NONE"``.
"""

from __future__ import annotations

import dataclasses
import json
import mmap
import os
import struct
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import fsspec
import numpy as np

from feedline.core import checksum, zstd
from feedline.core.errors import CheckpointError, DataLossError
from feedline.core.fingerprint import DeclaredTypes
from feedline.core.structure import flatten, pack_as
from feedline.snapshot.codec import (
    SavedTypes,
    byte_view,
    decode_leaves,
    element_parts,
    skeleton,
    structure_of,
)

MAGIC = b"FLCHUNK2"
MAGIC_V1 = b"FLCHUNK1"
COMPRESSIONS = ("ZSTD", "LZ4", "GZIP", "NONE")
FRAME_BYTES = 1 << 20
"""Small elements are grouped into frames of about this many (uncompressed) bytes."""
OWN_FRAME_BYTES = 256 << 10
"""An element this large (encoded) gets a frame of its own, read back without a copy."""
_U32 = struct.Struct("<I")
_PREFIX = struct.Struct("<8sII")  # magic, header length, header CRC32C
_ALIGN = 64  # frames start at multiples of this in the file
_ZSTD_THREADS_BYTES = 8 << 20  # a frame this large compresses on zstd's own threads too


def compression_of(value: str | None) -> str:
    """The canonical compression name (``None``/``""``: none; ``"AUTO"``: zstd).

    Example:
        >>> compression_of("auto"), compression_of(None), compression_of("gzip")
        ('ZSTD', 'NONE', 'GZIP')
    """
    name = "NONE" if value in (None, "") else str(value).upper()
    if name == "AUTO":
        name = "ZSTD"
    if name not in COMPRESSIONS:
        raise ValueError(f"compression must be one of AUTO, {', '.join(COMPRESSIONS)} or None; "
                         f"got {value!r}")
    if name == "LZ4":
        _lz4()
    return name


def _lz4() -> Any:
    try:
        import lz4.frame
    except ImportError:
        raise ImportError("LZ4 compression needs the lz4 package: pip install lz4 "
                          "(or use ZSTD, the default)") from None
    return lz4.frame


def crc32c(data: Any, crc: int = 0) -> int:
    """CRC32C of any buffer (``bytes``, ``bytearray``, memoryview, array), extending ``crc``.

    The CRC32C libraries take only read-only buffers; a NumPy array over the same memory is one
    it accepts, so writable buffers are checked in place, never copied.

    Example:
        >>> crc32c(b"123456789") == crc32c(bytearray(b"6789"), crc32c(b"12345")) == 0xE3069283
        True
    """
    if not isinstance(data, bytes):
        data = np.frombuffer(data, dtype=np.uint8)
    return checksum.extend(crc, data)


@dataclasses.dataclass
class PackedFrame:
    """A frame ready to be written: its (compressed) parts and what the header lists."""

    parts: list[Any]
    packed: int
    raw: int
    elements: int
    crc: int

    def entry(self) -> list[int]:
        return [self.packed, self.raw, self.elements, self.crc]


def pack_frame(parts: Sequence[Any], raw: int, elements: int, compression: str) -> PackedFrame:
    """Compress one frame's parts (never joined: big arrays are compressed where they lie).

    Runs on the writer's threads: zstd, lz4 and zlib release the GIL while they work, and
    so does NumPy copying an array that is not C-contiguous into C order.

    Example:
        >>> frame = pack_frame([b"abc", b"def"], 6, 1, "NONE")
        >>> frame.packed, frame.raw, frame.crc == crc32c(b"abcdef")
        (6, 6, True)
    """
    parts = [byte_view(part) for part in parts]
    if compression == "NONE":
        out = parts
    elif compression == "ZSTD":
        threads = min(4, os.cpu_count() or 1) if raw >= _ZSTD_THREADS_BYTES else 0
        stream = zstd.stream(raw, threads)
        out = [stream.compress(part) for part in parts]
        out.append(stream.flush())
    elif compression == "LZ4":
        lz4 = _lz4()
        stream = lz4.LZ4FrameCompressor()
        out = [stream.begin(raw)]
        out += [stream.compress(part) for part in parts]
        out.append(stream.flush())
    elif compression == "GZIP":
        stream = zlib.compressobj(6)
        out = [stream.compress(part) for part in parts]
        out.append(stream.flush())
    else:
        raise ValueError(f"unknown compression {compression!r}")
    out = [part for part in out if len(part)]
    crc, packed = 0, 0
    for part in out:
        crc = crc32c(part, crc)
        packed += part.nbytes if isinstance(part, memoryview) else len(part)
    return PackedFrame(out, packed, raw, elements, crc)


def _unpack_frame(packed: Any, raw: int, compression: str) -> Any:
    """Decompress one frame into a writable buffer of exactly ``raw`` bytes."""
    if compression == "ZSTD":
        out: Any = np.empty(raw, np.uint8)  # not zero-filled: decompression writes it all
        try:
            done = zstd.decompress_into(packed, out)
        except ValueError:
            done = raw + 1
        if done != raw:
            raise ValueError(f"the frame decompresses to {done}+ bytes, not {raw}")
        return out
    if compression == "LZ4":
        out = _lz4().decompress(packed, return_bytearray=True)
    elif compression == "GZIP":
        out = bytearray(zlib.decompress(packed))
    else:
        raise ValueError(f"unknown compression {compression!r}")
    if len(out) != raw:
        raise ValueError(f"the frame decompresses to {len(out)} bytes, not {raw}")
    return out


class ChunkBuilder:
    """Gathers one chunk's elements into frames; each full frame can start compressing at once.

    Args:
        compression: A canonical compression name.
        on_frame: Called with ``(parts, raw bytes, elements)`` of each closed frame; returns
            what :func:`chunk_parts` gets for it (a :class:`PackedFrame` or a future of one).
        copy: Copy large arrays when they are added (their owner may change them before
            the chunk is written), instead of referencing them.

    Example:
        >>> builder = ChunkBuilder("NONE")
        >>> [builder.add(np.full(2, i)) for i in range(3)]
        [30, 30, 30]
        >>> builder.elements, [f.elements for f in builder.close()]
        (3, [3])
    """

    def __init__(self, compression: str, on_frame: Any = None, copy: bool = False) -> None:
        self.compression = compression
        self.copy = copy
        self._on_frame = on_frame or (lambda parts, raw, count: pack_frame(
            parts, raw, count, compression))
        self.frames: list[Any] = []
        self.structure: Any = None
        self.elements = 0
        self.raw = 0
        self._parts: list[Any] = []
        self._raw = 0
        self._count = 0

    def add(self, element: Any) -> int:
        """Encode ``element`` into the chunk; returns its encoded size.

        Large arrays are referenced, not copied (they must not change until the chunk is
        written), unless the builder was made with ``copy=True``.
        """
        parts, size = element_parts(element)
        if self.copy:
            parts = [part if isinstance(part, bytearray) else bytearray(byte_view(part))
                     for part in parts]
        if self.structure is None:
            self.structure = skeleton(element)
        if size >= OWN_FRAME_BYTES:
            self._close_frame()
            self.frames.append(self._on_frame(parts, size, 1))
        else:
            self._parts += parts
            self._raw += size
            self._count += 1
            if self._raw >= FRAME_BYTES:
                self._close_frame()
        self.elements += 1
        self.raw += size
        return size

    def _close_frame(self) -> None:
        if self._count:
            self.frames.append(self._on_frame(self._parts, self._raw, self._count))
            self._parts, self._raw, self._count = [], 0, 0

    def close(self) -> list[Any]:
        """Close the last frame; returns every frame (as ``on_frame`` returned them)."""
        self._close_frame()
        return self.frames


def chunk_parts(frames: Sequence[PackedFrame], compression: str, structure: Any,
                extra: dict[str, Any] | None = None) -> list[Any]:
    """The buffers of a chunk file holding ``frames``: prefix, header, then every frame."""
    header = {"compression": compression, "elements": sum(f.elements for f in frames),
              "structure": structure, "bytes": sum(f.raw for f in frames),
              "frames": [f.entry() for f in frames], **(extra or {})}
    text = json.dumps(header, sort_keys=True).encode()
    parts: list[Any] = [_PREFIX.pack(MAGIC, len(text), crc32c(text)), text,
                        bytes(-(_PREFIX.size + len(text)) % _ALIGN)]
    for index, frame in enumerate(frames):
        parts += frame.parts
        if index < len(frames) - 1:
            parts.append(bytes(-frame.packed % _ALIGN))
    return [part for part in parts if len(part)]


def encode_chunk(elements: list[Any], compression: str,
                 extra: dict[str, Any] | None = None) -> bytes:
    """The bytes of a chunk file holding ``elements`` (all of one structure).

    Example:
        >>> data = encode_chunk([np.arange(3), np.arange(2)], "ZSTD")
        >>> data[:8], [a.tolist() for a in decode_chunk("doc", data)[1]]
        (b'FLCHUNK2', [[0, 1, 2], [0, 1]])
    """
    builder = ChunkBuilder(compression)
    for element in elements:
        builder.add(element)
    return b"".join(bytes(p) for p in chunk_parts(builder.close(), compression,
                                                   builder.structure, extra))


def write_file(path: str, data: bytes | Sequence[Any]) -> int:
    """Write ``data`` (bytes, or buffers one after the other) to ``path`` all at once: a
    temporary file, flushed to disk, renamed into place. Returns the bytes written.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "f")
        >>> write_file(path, [b"ab", memoryview(b"cd")]), open(path, "rb").read()
        (4, b'abcd')
    """
    parts = [data] if isinstance(data, bytes | bytearray | memoryview) else data
    written = 0
    if "://" in path and not path.startswith("file://"):
        fs, inner = fsspec.core.url_to_fs(path)
        temporary = f"{inner}.tmp-{os.getpid()}"
        with fs.open(temporary, "wb") as out:
            for part in parts:
                written += out.write(part) or 0
        fs.mv(temporary, inner)
        return written
    path = path.removeprefix("file://")
    folder = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        # Buffered: small parts are gathered, large ones go to the kernel as they are.
        with os.fdopen(handle, "wb", buffering=1 << 16) as out:
            for part in parts:
                written += out.write(part)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    return written


@dataclasses.dataclass(frozen=True)
class ChunkIdentity:
    """What a store's manifest says chunk file ``shard``/``chunk`` must be.

    Attributes:
        store: The store's random id (one per store, written into each of its chunks).
        shard: The shard the chunk belongs to.
        chunk: Its number within the shard.
        checksum: The CRC32C of its header (:func:`header_checksum`), which lists the CRC32C
            of every frame: it vouches for the whole file.
    """

    store: str
    shard: int
    chunk: int
    checksum: int

    def header_fields(self) -> dict[str, Any]:
        """The fields a chunk of this identity carries in its header."""
        return {"store": self.store, "shard": self.shard, "chunk": self.chunk}

    def describe(self) -> str:
        return f"chunk {self.chunk} of shard {self.shard} of store {self.store}"


def header_checksum(parts: Sequence[Any]) -> int:
    """The checksum a manifest lists for the chunk :func:`chunk_parts` gave as ``parts``.

    Example:
        >>> parts = chunk_parts([pack_frame([b"ab"], 2, 1, "NONE")], "NONE", 0)
        >>> header_checksum(parts) == read_header("doc", b"".join(parts))[2]
        True
    """
    return _PREFIX.unpack_from(bytes(parts[0][:_PREFIX.size]))[2]


def read_header(path: str, data: Any, expected: ChunkIdentity | None = None
                ) -> tuple[dict[str, Any], int, int | None]:
    """The header of a chunk file's bytes (any buffer), where its payload starts, and its
    checksum (``None`` for format 1, which has none).

    Raises:
        DataLossError: The file is damaged, or it is not the chunk ``expected`` names (the
            message says what was expected and what was found).
    """
    magic = bytes(data[:8])
    if magic == MAGIC and len(data) >= _PREFIX.size:
        _, size, crc = _PREFIX.unpack_from(data)
        text = bytes(data[_PREFIX.size:_PREFIX.size + size])
        if len(text) != size or crc32c(text) != crc:
            raise DataLossError(f"{path}: the chunk's header is damaged (checksum)", path=path)
        header = _parse_header(path, text)
        if expected is not None:
            _check_identity(path, header, crc, expected)
        return header, _aligned(_PREFIX.size + size), crc
    if magic != MAGIC_V1 or len(data) < 12:
        raise DataLossError(f"{path} is not a feedline chunk file (or is damaged)", path=path)
    if expected is not None:
        raise DataLossError(f"{path}: expected {expected.describe()}, found a format 1 chunk, "
                            "which carries no identity (a file copied from an older store?)",
                            path=path)
    (size,) = _U32.unpack_from(data, 8)
    return _parse_header(path, bytes(data[12:12 + size])), 12 + size, None


def _check_identity(path: str, header: dict[str, Any], crc: int,
                    expected: ChunkIdentity) -> None:
    """A chunk whose header is sound must also be the one its store's manifest lists."""
    found = {key: header.get(key) for key in ("store", "shard", "chunk")}
    if found != expected.header_fields():
        if found["store"] is None:
            what = "a chunk that names no store"
        elif found["store"] != expected.store:
            what = (f"chunk {found['chunk']} of shard {found['shard']} of another store "
                    f"({found['store']}): a file copied from another save, snapshot or cache")
        else:
            what = (f"chunk {found['chunk']} of shard {found['shard']}: a chunk file swapped "
                    "with or copied over another")
        raise DataLossError(f"{path}: expected {expected.describe()}, found {what}", path=path)
    if crc != expected.checksum:
        raise DataLossError(
            f"{path}: expected {expected.describe()} with checksum {expected.checksum:08x} (as "
            f"the manifest lists), found checksum {crc:08x}: a chunk of another write of this "
            "store put in its place", path=path)


def _aligned(offset: int) -> int:
    return offset + -offset % _ALIGN


def _parse_header(path: str, text: bytes) -> dict[str, Any]:
    try:
        header = json.loads(text)
    except ValueError as error:
        raise DataLossError(f"{path}: damaged chunk header: {error}", path=path) from None
    if not isinstance(header, dict):
        raise DataLossError(f"{path}: damaged chunk header: not an object", path=path)
    return header


@dataclasses.dataclass
class Frame:
    """A read frame: its decoded bytes, how many elements they hold, and whether elements
    may be views into them (a writable buffer of this chunk alone)."""

    data: Any
    elements: int
    shared: bool = False


def read_chunk(path: str, types: DeclaredTypes | None = None) -> tuple[dict[str, Any],
                                                                      Iterator[Any]]:
    """The header of chunk ``path`` and an iterator of its elements (CRCs checked first).

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "c")
        >>> _ = write_file(path, encode_chunk([(1, b"a"), (2, b"b")], "LZ4"))
        >>> header, elements = read_chunk(path)
        >>> header["elements"], [(int(x), y) for x, y in elements]
        (2, [(1, b'a'), (2, b'b')])
    """
    header, frames = load_chunk(path)
    return header, chunk_elements(path, header, frames, types)


def decode_chunk(path: str, data: bytes, types: DeclaredTypes | None = None
                 ) -> tuple[dict[str, Any], Iterator[Any]]:
    """Like :func:`read_chunk`, from a chunk file's bytes (``path`` names it in errors)."""
    header, start, _ = read_header(path, data)
    frames = _check_frames(path, header, memoryview(data)[start:], shared=False)
    return header, chunk_elements(path, header, frames, types)


def _is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def load_chunk(path: str, expected: ChunkIdentity | None = None
               ) -> tuple[dict[str, Any], list[Frame]]:
    """Read, check and decompress chunk ``path``: its header and its frames.

    ``expected``: the chunk its store's manifest lists at ``path``; a file that is another
    (swapped, copied, or of another store or write) is refused before any element is read.

    A local file is mapped into memory (copy-on-write: writable, and never written back),
    not read: an uncompressed frame's elements are then views into the page cache itself
    (no copy, and no fresh memory to fault in, which is what bounded reading here), and
    compressed frames decompress straight from it. Chunk files are never changed in place
    (they are written under a temporary name and renamed), which is what makes mapping
    them safe; do not overwrite a snapshot's files in place while it is being read.
    Remote files (fsspec) are read in one call.

    The heavy part (decompression, faulting pages in) releases the GIL, and the CRCs are
    short: readers run it on threads, chunks ahead of the one being handed out.

    Raises:
        DataLossError: The file is damaged or not the ``expected`` chunk (the message names
            it); ``FileNotFoundError`` when it is missing.
    """
    if _is_local(path):
        with open(path.removeprefix("file://"), "rb") as file:
            data: Any = _map(file)
        shared = True
    else:
        with fsspec.open(path, "rb") as file:
            data = file.read()
        shared = False  # bytes: read-only, so elements are copied out
    view = memoryview(data)
    header, start, _ = read_header(path, view, expected)
    return header, _check_frames(path, header, view[start:], shared)


def _map(file: Any) -> Any:
    """``file`` mapped copy-on-write (the map outlives the file object), or read into a
    ``bytearray`` where it cannot be mapped (an empty file; no address space or map left:
    ``vm.max_map_count`` when very many chunks' elements are held)."""
    size = os.fstat(file.fileno()).st_size
    if size:
        try:
            return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
        except (OSError, ValueError):
            pass
    data = bytearray(size)
    view, done = memoryview(data), 0
    while done < size:
        got = file.readinto(view[done:])
        if not got:
            break  # it shrank meanwhile: checked as a truncated chunk
        done += got
    return data if done == size else data[:done]


def _frames_of(path: str, header: dict[str, Any]) -> list[list[int]]:
    try:
        frames = [[int(v) for v in frame] for frame in header["frames"]]
        if any(len(f) != 4 or min(f) < 0 for f in frames) or \
                sum(f[2] for f in frames) != int(header["elements"]):
            raise ValueError("frames do not add up")
        return frames
    except (KeyError, TypeError, ValueError) as error:
        raise DataLossError(f"{path}: damaged chunk header: {error}", path=path) from None


def _check_frames(path: str, header: dict[str, Any], payload: memoryview,
                  shared: bool) -> list[Frame]:
    """Check the CRCs of a chunk's payload and decompress its frames (``shared``: the
    payload is writable memory of this chunk alone, which elements may be views into)."""
    compression = header.get("compression")
    if "frames" not in header:  # format 1: one frame, one CRC
        if crc32c(payload) != header.get("crc32c"):
            raise DataLossError(f"{path}: the chunk's checksum does not match (damaged file)",
                                path=path)
        entries = [[len(payload), int(header["bytes"]), int(header["elements"]), -1]]
    else:
        entries = _frames_of(path, header)
        expected = sum(_aligned(e[0]) for e in entries[:-1]) + sum(e[0] for e in entries[-1:])
        if expected != len(payload):
            raise DataLossError(f"{path}: the chunk is truncated or too long (damaged file)",
                                path=path)
    frames, at = [], 0
    for packed, raw, count, crc in entries:
        data = payload[at:at + packed]
        at += packed
        if crc >= 0 and crc32c(data) != crc:
            raise DataLossError(f"{path}: the chunk's checksum does not match (damaged file)",
                                path=path)
        if at < len(payload) and crc >= 0:  # the zeros before the next frame
            if any(payload[at:_aligned(at)]):
                raise DataLossError(f"{path}: damaged padding between frames (damaged file)",
                                    path=path)
            at = _aligned(at)
        if compression == "NONE":
            if packed != raw:
                raise DataLossError(f"{path}: damaged chunk header (sizes)", path=path)
            frames.append(Frame(data, count, shared))
            continue
        try:
            frames.append(Frame(_unpack_frame(data, raw, str(compression)), count, True))
        except Exception as error:  # noqa: BLE001 - any codec's failure is damage here
            raise DataLossError(f"{path}: the chunk does not decompress: {error}",
                                path=path) from None
    return frames


def chunk_elements(path: str, header: dict[str, Any], frames: list[Frame],
                   types: DeclaredTypes | None = None) -> Iterator[Any]:
    """The elements of a chunk :func:`load_chunk` returned.

    An element alone in its frame is made of views into the frame's buffer (zero-copy,
    writable: a decompressed buffer, or the copy-on-write map of an uncompressed file);
    elements sharing a frame are copied out of it, so a few held never pin it.
    """
    count = int(header["elements"])
    if not count:
        return
    saved = SavedTypes(types)
    try:
        structure = structure_of(header["structure"], saved)
        leaves_per_element = len(flatten(structure))
    except (CheckpointError, KeyError, TypeError, ValueError, RecursionError) as error:
        raise DataLossError(f"{path}: damaged chunk header (the elements' structure): "
                            f"{error}", path=path) from None
    index = 0
    for position, frame in enumerate(frames):
        frames[position] = None  # type: ignore[call-overload]  # freed once handed out
        views = frame.elements == 1 and frame.shared
        at = 0
        for _ in range(frame.elements):
            leaves, at = decode_leaves(frame.data, at, leaves_per_element,
                                       f"{path}, element {index}", copy=not views,
                                       types=saved)
            index += 1
            yield pack_as(structure, leaves)
        if at != len(frame.data):
            raise DataLossError(f"{path}, element {index - 1}: damaged element data (the "
                                "frame is longer than its elements)", path=path)
