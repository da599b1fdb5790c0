"""Chunk files: the unit a snapshot or a saved dataset is written, committed and checked in.

A chunk file is::

    b"FLCHUNK1"
    u32 header length, header JSON: compression, elements, structure, uncompressed bytes,
                                    CRC32C of the payload, the writer's resume state
    payload: the elements (:mod:`feedline.snapshot.codec`), compressed as one frame

It is written to a temporary name in its folder and renamed into place, so a chunk that
exists is complete (a crash leaves at most a temporary file, never a partial chunk); its
CRC32C is checked when read, and damage is a :class:`~feedline.core.errors.DataLossError`
naming the file.

Compression: ``"ZSTD"`` (the default, level 1: fast, and it releases the GIL, so chunks
compress in parallel), ``"LZ4"`` (the optional ``lz4`` package), ``"GZIP"``, ``"NONE"``.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
import zlib
from collections.abc import Iterator
from typing import Any

import fsspec
import google_crc32c

from feedline.core.errors import DataLossError
from feedline.core.fingerprint import DeclaredTypes
from feedline.core.structure import pack_as
from feedline.snapshot.codec import (
    SavedTypes,
    decode_leaves,
    encode_element,
    skeleton,
    structure_of,
)

MAGIC = b"FLCHUNK1"
COMPRESSIONS = ("ZSTD", "LZ4", "GZIP", "NONE")
_U32 = struct.Struct("<I")


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


def compress(data: bytes, compression: str) -> bytes:
    if compression == "ZSTD":
        import zstandard

        # Large chunks compress on several threads (zstd's own, outside the GIL).
        threads = min(4, os.cpu_count() or 1) if len(data) >= 4 << 20 else 0
        return zstandard.ZstdCompressor(level=1, threads=threads).compress(data)
    if compression == "LZ4":
        return _lz4().compress(data)
    if compression == "GZIP":
        return zlib.compress(data, 6)
    return data


def decompress(data: bytes, compression: str, size: int) -> bytes:
    if compression == "ZSTD":
        import zstandard

        return zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
    if compression == "LZ4":
        return _lz4().decompress(data)
    if compression == "GZIP":
        return zlib.decompress(data)
    return data


def encode_chunk(elements: list[Any], compression: str, extra: dict[str, Any]) -> bytes:
    """The bytes of a chunk file holding ``elements`` (all of one structure)."""
    payload = bytearray()
    for element in elements:
        encode_element(element, payload)
    raw = bytes(payload)
    packed = compress(raw, compression)
    header = {"compression": compression, "elements": len(elements),
              "structure": skeleton(elements[0]) if elements else None,
              "bytes": len(raw), "crc32c": google_crc32c.value(packed), **extra}
    text = json.dumps(header, sort_keys=True).encode()
    return MAGIC + _U32.pack(len(text)) + text + packed


def write_file(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` all at once: a temporary file renamed into place."""
    if "://" in path and not path.startswith("file://"):
        fs, inner = fsspec.core.url_to_fs(path)
        temporary = f"{inner}.tmp-{os.getpid()}"
        with fs.open(temporary, "wb") as out:
            out.write(data)
        fs.mv(temporary, inner)
        return
    folder = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def read_header(path: str, data: bytes) -> tuple[dict[str, Any], int]:
    """The header of a chunk file's bytes and where its payload starts."""
    if data[:8] != MAGIC or len(data) < 12:
        raise DataLossError(f"{path} is not a feedline chunk file (or is damaged)", path=path)
    (size,) = _U32.unpack_from(data, 8)
    try:
        header = json.loads(data[12:12 + size])
    except ValueError as error:
        raise DataLossError(f"{path}: damaged chunk header: {error}", path=path) from None
    return header, 12 + size


def read_chunk(path: str, types: DeclaredTypes | None = None) -> tuple[dict[str, Any],
                                                                      Iterator[Any]]:
    """The header of chunk ``path`` and an iterator of its elements (CRC checked first)."""
    header, raw = load_chunk(path)
    return header, chunk_elements(path, header, raw, types)


def chunk_elements(path: str, header: dict[str, Any], raw: bytes,
                   types: DeclaredTypes | None = None) -> Iterator[Any]:
    """The elements of a chunk :func:`load_chunk` returned."""
    return _elements(path, header, raw, SavedTypes(types))


def load_chunk(path: str) -> tuple[dict[str, Any], bytes]:
    """Read, check and decompress chunk ``path``: its header and raw element bytes.

    The heavy part (the read, the CRC, decompression) releases the GIL: readers run it on
    threads, chunks ahead of the one being handed out.
    """
    with fsspec.open(path, "rb") as file:
        data = file.read()
    header, start = read_header(path, data)
    packed = data[start:]
    if google_crc32c.value(packed) != header.get("crc32c"):
        raise DataLossError(f"{path}: the chunk's checksum does not match (damaged file)",
                            path=path)
    try:
        raw = decompress(packed, header["compression"], int(header["bytes"]))
    except Exception as error:  # noqa: BLE001 - any codec's failure is damage here
        raise DataLossError(f"{path}: the chunk does not decompress: {error}",
                            path=path) from None
    return header, raw


def _elements(path: str, header: dict[str, Any], raw: bytes, types: DeclaredTypes
              ) -> Iterator[Any]:
    count = int(header["elements"])
    if not count:
        return
    structure = structure_of(header["structure"], types)
    from feedline.core.structure import flatten

    leaves_per_element = len(flatten(structure))
    at = 0
    for index in range(count):
        leaves, at = decode_leaves(raw, at, leaves_per_element, f"{path}, element {index}")
        yield pack_as(structure, leaves)
