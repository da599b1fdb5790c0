"""feedline.core.zstd gives the same frames' contents through zstandard and compression.zstd
(backports.zstd below 3.14): free-threaded builds have only the second."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from feedline.core import zstd
from feedline.snapshot import chunks

LIBRARIES = [name for name, available in (
    ("zstandard", zstd._zstandard() is not None), ("stdlib", True)) if available]


@pytest.fixture(params=LIBRARIES)
def library(request, monkeypatch):
    if request.param == "stdlib":
        monkeypatch.setattr(zstd, "_zstandard", lambda: None)
    return request.param


def _payload(size: int) -> bytes:
    rng = np.random.default_rng(7)
    return rng.integers(0, 16, size, dtype=np.uint8).tobytes()  # compressible, not trivial


def test_the_library_in_use_is_named(library):
    expected = {"zstandard"} if library == "zstandard" else {"compression.zstd",
                                                             "backports.zstd"}
    assert zstd.library() in expected


@pytest.mark.parametrize("threads", [0, 2])
def test_a_frame_of_several_parts_decompresses_to_their_bytes(library, threads):
    parts = [_payload(1000), _payload(70_000), b"", _payload(5)]
    raw = sum(len(part) for part in parts)
    frame = zstd.stream(raw, threads)
    packed = b"".join([frame.compress(part) for part in parts] + [frame.flush()])
    assert zstd.decompress(packed) == b"".join(parts)
    out = bytearray(raw)
    assert zstd.decompress_into(packed, out) == raw
    assert bytes(out) == b"".join(parts)


def test_decompress_into_refuses_a_frame_larger_than_the_buffer(library):
    packed = zstd.compress(b"abcdef")
    with pytest.raises(ValueError, match="more than 5 bytes"):
        zstd.decompress_into(packed, bytearray(5))
    assert zstd.decompress_into(packed, bytearray(8)) == 6


@pytest.mark.skipif(len(LIBRARIES) < 2, reason="zstandard is not installed")
def test_each_library_reads_the_others_frames(monkeypatch):
    data = _payload(300_000)
    from_zstandard = zstd.compress(data)
    monkeypatch.setattr(zstd, "_zstandard", lambda: None)
    from_stdlib = zstd.compress(data)
    assert zstd.decompress(from_zstandard) == data
    monkeypatch.undo()
    assert zstd.decompress(from_stdlib) == data


def test_snapshot_frames_round_trip(library):
    parts = [np.arange(50_000, dtype=np.int64), b"tail"]
    raw = sum(memoryview(part).nbytes for part in parts)
    frame = chunks.pack_frame(parts, raw, 2, "ZSTD")
    packed = b"".join(bytes(part) for part in frame.parts)
    out = chunks._unpack_frame(packed, raw, "ZSTD")
    assert bytes(out) == np.arange(50_000, dtype=np.int64).tobytes() + b"tail"
    with pytest.raises(ValueError, match="not 10"):
        chunks._unpack_frame(packed, 10, "ZSTD")


def test_threads_compress_at_once_with_their_own_compressors(library):
    data = [_payload(200_000 + index) for index in range(4)]
    results: dict[int, bytes] = {}

    def work(index: int) -> None:
        for _ in range(5):
            results[index] = zstd.decompress(zstd.compress(data[index]))

    threads = [threading.Thread(target=work, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert results == dict(enumerate(data))
