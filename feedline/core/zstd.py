"""zstd for snapshots, caches and the service's transport, from whichever library is installed.

``zstandard`` where it is installed (the GIL builds' test environments have it), else Python
3.14's ``compression.zstd`` or its backport ``backports.zstd`` (a dependency of feedline below
3.14: it has wheels for free-threaded 3.13t, which ``zstandard`` lacks). Both write standard zstd
frames with the same library underneath, so what one compresses the other decompresses.
Compressor objects are not thread-safe: each thread gets its own.
"""

from __future__ import annotations

import functools
import threading
from types import ModuleType
from typing import Any

_local = threading.local()


@functools.cache
def _zstandard() -> ModuleType | None:
    try:
        import zstandard
    except ImportError:
        return None
    return zstandard


@functools.cache
def _stdlib() -> ModuleType:
    try:
        from compression import zstd
    except ImportError:
        try:
            from backports import zstd
        except ImportError:
            raise ImportError("zstd needs the backports.zstd package below Python 3.14: pip "
                              "install backports.zstd (or zstandard)") from None
    return zstd


def library() -> str:
    """The library that compresses: ``"zstandard"``, ``"compression.zstd"`` or
    ``"backports.zstd"``.

    Example:
        >>> library() in ("zstandard", "compression.zstd", "backports.zstd")
        True
    """
    return "zstandard" if _zstandard() is not None else _stdlib().__name__


class _StdlibStream:
    """One zstd frame over several parts, from compression.zstd (zstandard's ``compressobj``)."""

    def __init__(self, compressor: Any, size: int) -> None:
        self._compressor = compressor
        pledge = getattr(compressor, "set_pledged_input_size", None)
        if pledge is not None and size >= 0:
            pledge(size)  # the frame header then says its size, as zstandard's does

    def compress(self, data: Any) -> bytes:
        return self._compressor.compress(data)

    def flush(self) -> bytes:
        return self._compressor.flush()


def stream(size: int = -1, threads: int = 0) -> Any:
    """A compressor of one zstd frame (level 1): ``.compress(part)`` for each part, then
    ``.flush()``; ``threads`` > 0 compresses on that many of zstd's own threads too.

    Args:
        size: The frame's uncompressed size, written in its header (-1: unknown).
        threads: zstd's worker threads (0: compress on the calling thread).

    Example:
        >>> frame = stream(6)
        >>> packed = frame.compress(b"abc") + frame.compress(b"def") + frame.flush()
        >>> decompress(packed)
        b'abcdef'
    """
    zstandard = _zstandard()
    key = f"compress-{'zstandard' if zstandard is not None else 'stdlib'}-{threads}"
    compressor = getattr(_local, key, None)
    if compressor is None:
        if zstandard is not None:
            compressor = zstandard.ZstdCompressor(level=1, threads=threads)
        else:
            zstd = _stdlib()
            options = {zstd.CompressionParameter.compression_level: 1}
            if threads:
                options[zstd.CompressionParameter.nb_workers] = threads
            compressor = zstd.ZstdCompressor(options=options)
        setattr(_local, key, compressor)
    if zstandard is not None:
        return compressor.compressobj(size=size)
    return _StdlibStream(compressor, size)


def compress(data: Any) -> bytes:
    """``data`` as one zstd frame (level 1).

    Example:
        >>> decompress(compress(b"x" * 1000)) == b"x" * 1000
        True
    """
    frame = stream(len(memoryview(data).cast("B")))
    return frame.compress(data) + frame.flush()


def decompress(data: Any) -> bytes:
    """The bytes of every zstd frame in ``data``.

    Example:
        >>> decompress(compress(b"abc") + compress(b"def"))
        b'abcdef'
    """
    zstandard = _zstandard()
    if zstandard is None:
        return _stdlib().decompress(data)
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    with reader:
        return reader.read()


def decompress_into(data: Any, out: Any) -> int:
    """Decompress the zstd frame ``data`` into the writable buffer ``out``; the number of bytes
    written, and ``ValueError`` when the frame holds more than ``out`` takes.

    Example:
        >>> out = bytearray(3)
        >>> decompress_into(compress(b"abc"), out), bytes(out)
        (3, b'abc')
    """
    view = memoryview(out).cast("B")
    zstandard = _zstandard()
    if zstandard is None:
        # compression.zstd hands back bytes: one copy into ``out``.
        decompressor = _stdlib().ZstdDecompressor()
        done = decompressor.decompress(data, max_length=len(view))
        if len(done) == len(view) and not decompressor.eof and \
                decompressor.decompress(b"", max_length=1):
            raise ValueError(f"the frame decompresses to more than {len(view)} bytes")
        view[:len(done)] = done
        return len(done)
    decompressor = getattr(_local, "decompress", None)
    if decompressor is None:
        decompressor = zstandard.ZstdDecompressor()
        _local.decompress = decompressor
    reader = decompressor.stream_reader(data)
    done = 0
    while done < len(view):  # straight into the buffer: no intermediate bytes object
        got = reader.readinto(view[done:])
        if not got:
            break
        done += got
    if done == len(view) and reader.read(1):
        raise ValueError(f"the frame decompresses to more than {len(view)} bytes")
    return done
