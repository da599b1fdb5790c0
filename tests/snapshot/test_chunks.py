"""Chunk files: frames, zero-copy reading, encoding without copies, damage, format 1."""

import json
import mmap
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import zstandard

import feedline as fl
from feedline.snapshot import chunks
from feedline.snapshot.chunks import (
    FRAME_BYTES,
    OWN_FRAME_BYTES,
    ChunkBuilder,
    chunk_parts,
    encode_chunk,
    load_chunk,
    read_chunk,
    write_file,
)
from feedline.snapshot.codec import (
    REFERENCE_BYTES,
    byte_view,
    element_parts,
    encode_element,
    skeleton,
)
from feedline.testing.elements import assert_elements_equal

COMPRESSIONS = ["NONE", "ZSTD", "GZIP", "LZ4"]


def big(i):
    """An element large enough for a frame of its own (read back as views)."""
    return {"board": np.full((64, 1100), i, dtype=np.float32), "score": np.float32(i),
            "name": b"big%d" % i}


def small(i):
    return {"board": np.full(8, i, dtype=np.float32), "score": np.float32(i),
            "name": b"small%d" % i}


def root(array):
    """The object at the end of an array's chain of bases (what owns the memory)."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    while isinstance(array, memoryview):
        array = array.obj
    return array


def write_chunk(folder, elements, compression):
    path = os.path.join(folder, "chunk.flchunk")
    write_file(path, encode_chunk(elements, compression))
    return path


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_big_and_small_elements_round_trip_in_frames(tmp_path, compression):
    elements = [small(0), small(1), big(2), small(3), big(4), big(5), small(6)]
    path = write_chunk(tmp_path, elements, compression)
    header, got = read_chunk(path)
    got = list(got)
    assert_elements_equal(got, elements)
    # Small neighbours share a frame; each big element has its own.
    assert [frame[2] for frame in header["frames"]] == [2, 1, 1, 1, 1, 1]
    assert header["elements"] == 7 and header["compression"] == compression
    for element in got:
        assert element["board"].flags.writeable
    for i in (2, 4, 5):  # alone in a frame: aligned views into it, not copies
        assert not got[i]["board"].flags.owndata
    assert all(e["board"].flags.aligned for e in got)  # unaligned small leaves: copies
    for i in (0, 1):  # sharing a frame: copies, so that one held never pins the others
        assert got[i]["board"].flags.owndata


def test_uncompressed_local_chunks_are_read_without_a_copy(tmp_path):
    elements = [big(i) for i in range(3)]
    path = write_chunk(tmp_path, elements, "NONE")
    got = list(read_chunk(path)[1])
    assert_elements_equal(got, elements)
    # The arrays are views into the mapped file (the page cache), copy-on-write.
    assert all(isinstance(root(e["board"]), mmap.mmap) for e in got)
    got[1]["board"][0, 0] = -7.0  # writable; the file is never written through the map
    assert got[1]["board"][0, 0] == -7.0
    assert_elements_equal(list(read_chunk(path)[1]), elements)


def test_compressed_frames_decompress_into_buffers_of_their_own(tmp_path):
    path = write_chunk(tmp_path, [big(0), big(1)], "ZSTD")
    first, second = list(read_chunk(path)[1])
    assert isinstance(root(first["board"]), np.ndarray)  # a decompressed buffer, no map
    assert root(first["board"]) is not root(second["board"])
    assert first["board"].flags.writeable and not first["board"].flags.owndata


def test_remote_uncompressed_chunks_are_copied_out(tmp_path):
    import fsspec

    url = "memory://chunk-test/chunk.flchunk"
    try:
        write_file(url, encode_chunk([big(3), small(4)], "NONE"))
        got = list(read_chunk(url)[1])
        assert_elements_equal(got, [big(3), small(4)])
        assert got[0]["board"].flags.writeable and got[0]["board"].flags.owndata
    finally:
        fsspec.filesystem("memory").rm("/chunk-test", recursive=True)


def test_element_parts_reference_large_arrays_and_copy_small_ones():
    large = np.arange(REFERENCE_BYTES // 8, dtype=np.int64)
    element = (large, np.arange(3), b"tail")
    parts, size = element_parts(element)
    views = [p for p in parts if isinstance(p, memoryview)]
    assert len(views) == 1 and np.shares_memory(np.frombuffer(views[0], np.uint8), large)
    assert size == sum(len(p) if not isinstance(p, memoryview) else p.nbytes for p in parts)
    encoded = bytearray()
    encode_element(element, encoded)
    assert bytes(encoded) == b"".join(bytes(p) for p in parts)


def test_transposed_arrays_are_written_and_read_as_they_lie_in_memory(tmp_path):
    # The chess batches' boards are like this: channels outermost in memory.
    board = np.arange(24 * 40 * 8 * 8, dtype=np.float32).reshape(24, 40, 8, 8)
    board = board.transpose(1, 2, 3, 0)
    assert not board.flags.c_contiguous
    parts, _ = element_parts((board, b"t"))
    [view] = [p for p in parts if isinstance(p, memoryview)]
    assert np.shares_memory(np.frombuffer(view, np.uint8), board)  # no copy
    for compression in ("NONE", "ZSTD"):
        path = write_chunk(tmp_path, [(board, b"t")], compression)
        [(got, tag)] = list(read_chunk(path)[1])
        assert tag == b"t" and np.array_equal(got, board)
        assert got.strides == board.strides and not got.flags.owndata  # same layout, a view


def test_strided_arrays_are_copied_by_the_writer_not_the_caller(tmp_path):
    strided = np.arange(300 * 800, dtype=np.float32).reshape(300, 800)[:, ::2]
    parts, size = element_parts((strided, b"s"))
    assert any(part is strided for part in parts)  # as it is: no copy on this thread
    assert size == sum(len(byte_view(p)) if not isinstance(p, np.ndarray) else p.nbytes
                       for p in parts)
    for compression in ("NONE", "ZSTD"):
        path = write_chunk(tmp_path, [(strided, b"s")], compression)
        [(got, tag)] = list(read_chunk(path)[1])
        assert tag == b"s" and got.flags.c_contiguous and np.array_equal(got, strided)


def test_small_elements_keep_the_layout_of_transposed_arrays_when_copied(tmp_path):
    big_t = np.arange(200 * 100, dtype=np.int32).reshape(200, 100).T  # 80 KB, permuted
    elements = [(big_t + i, b"%d" % i) for i in range(20)]  # 20 a frame: copied when read
    path = write_chunk(tmp_path, elements, "NONE")
    got = list(read_chunk(path)[1])
    assert_elements_equal(got, elements)
    assert all(g[0].flags.owndata and g[0].strides == big_t.strides for g in got)


@pytest.mark.parametrize("array", [
    np.arange(40_000, dtype=">i8")[::2],  # big-endian, not contiguous
    np.arange(20_000).astype("datetime64[s]"),  # no memoryview of datetime data
    np.zeros((0, 3), np.uint8),
    np.array(3.5, dtype=np.float64),  # 0-d: a NumPy scalar comes back
    np.array([b"ab", b"c"] * 40_000),  # fixed-size bytes
    np.zeros((300, 7), dtype="V3"),  # void
    np.arange(30_000, dtype=np.complex128).reshape(100, 300),
])
def test_unusual_arrays_round_trip_through_the_reference_path(tmp_path, array):
    path = write_chunk(tmp_path, [(array, b"x")], "NONE")
    [(got, tag)] = list(read_chunk(path)[1])
    assert tag == b"x" and got.dtype == array.dtype and got.shape == array.shape
    assert np.array_equal(got, array)


def test_frames_close_at_the_frame_size():
    builder = ChunkBuilder("NONE")
    tiny = np.zeros(1000, np.uint8)
    for _ in range(2 * FRAME_BYTES // 1000 + 10):
        builder.add(tiny)
    frames = builder.close()
    assert len(frames) == 3 and sum(f.elements for f in frames) == builder.elements
    assert all(f.raw >= FRAME_BYTES for f in frames[:2])
    just_big = np.zeros(OWN_FRAME_BYTES, np.uint8)
    builder.add(tiny)
    builder.add(just_big)  # closes the small frame, then one frame of its own
    assert [f.elements for f in builder.close()[3:]] == [1, 1]


def test_the_header_lists_frames_with_their_checksums(tmp_path):
    path = write_chunk(tmp_path, [big(0), small(1)], "ZSTD")
    data = Path(path).read_bytes()
    assert data[:8] == b"FLCHUNK2"
    _, size, crc = struct.unpack_from("<8sII", data)
    header = json.loads(data[16:16 + size])
    assert chunks.crc32c(data[16:16 + size]) == crc
    at = aligned(16 + size)  # frames start at multiples of 64 (mapped arrays are aligned)
    for packed, raw, count, frame_crc in header["frames"]:
        assert at % 64 == 0 and chunks.crc32c(data[at:at + packed]) == frame_crc
        assert not any(data[at + packed:aligned(at + packed)])
        at = aligned(at + packed)
    assert at == aligned(len(data)) and header["bytes"] == sum(f[1] for f in header["frames"])
    assert header["structure"] == skeleton(small(0))


def aligned(offset):
    return -(-offset // 64) * 64


def frame_starts(data):
    size = struct.unpack_from("<I", data, 8)[0]
    at, starts = aligned(16 + size), []
    for packed, *_ in json.loads(data[16:16 + size])["frames"]:
        starts.append((at, packed))
        at = aligned(at + packed)
    return starts


def damage(path, offset):
    data = bytearray(Path(path).read_bytes())
    data[offset] ^= 0xFF
    Path(path).write_bytes(bytes(data))


@pytest.mark.parametrize("compression", ["NONE", "ZSTD"])
def test_damage_anywhere_is_a_data_loss_error_naming_the_file(tmp_path, compression):
    elements = [big(0), big(1), small(2)]
    path = write_chunk(tmp_path, elements, compression)
    starts = frame_starts(Path(path).read_bytes())
    (first, first_size), (last, last_size) = starts[0], starts[-1]
    for offset, message in [(3, "not a feedline chunk file"), (14, "header is damaged"),
                            (40, "header is damaged"), (first, "checksum does not match"),
                            (first + first_size // 2, "checksum does not match"),
                            (first + first_size, "damaged padding"),
                            (last + last_size - 1, "checksum does not match")]:
        write_chunk(tmp_path, elements, compression)
        damage(path, offset)
        with pytest.raises(fl.DataLossError, match=f"chunk.flchunk.*{message}") as caught:
            load_chunk(path)
        assert caught.value.path == path
    write_chunk(tmp_path, elements, compression)
    data = Path(path).read_bytes()
    for cut, message in [(data[:-10], "truncated"), (data + b"junk", "too long"),
                         (b"", "not a feedline chunk file")]:
        Path(path).write_bytes(cut)
        with pytest.raises(fl.DataLossError, match=message):
            load_chunk(path)


def test_a_frame_whose_elements_do_not_fill_it_is_damage(tmp_path):
    # A well-formed file (CRCs right) whose header says one element where two are stored.
    builder = ChunkBuilder("NONE")
    builder.add(small(0))
    builder.add(small(1))
    [frame] = builder.close()
    frame.elements = 1
    path = os.path.join(tmp_path, "odd.flchunk")
    write_file(path, chunk_parts([frame], "NONE", builder.structure))
    with pytest.raises(fl.DataLossError, match="odd.flchunk.*longer than its elements"):
        list(read_chunk(path)[1])


def format_1_chunk(elements):
    """A chunk as feedline wrote it before frames (FLCHUNK1: one zstd frame, one CRC)."""
    payload = bytearray()
    for element in elements:
        encode_element(element, payload)
    packed = zstandard.ZstdCompressor(level=1).compress(bytes(payload))
    header = {"compression": "ZSTD", "elements": len(elements),
              "structure": skeleton(elements[0]), "bytes": len(payload),
              "crc32c": chunks.crc32c(packed)}
    text = json.dumps(header, sort_keys=True).encode()
    return b"FLCHUNK1" + struct.pack("<I", len(text)) + text + packed


def test_format_1_chunks_are_still_read(tmp_path):
    elements = [big(0), small(1), small(2)]
    path = os.path.join(tmp_path, "old.flchunk")
    write_file(path, format_1_chunk(elements))
    got = list(read_chunk(path)[1])
    assert_elements_equal(got, elements)
    assert all(e["board"].flags.owndata and e["board"].flags.writeable for e in got)
    damage(path, os.path.getsize(path) - 3)
    with pytest.raises(fl.DataLossError, match="old.flchunk: the chunk's checksum"):
        load_chunk(path)


def test_a_saved_dataset_of_format_1_chunks_loads(tmp_path):
    fl.Dataset.range(3).map(big).save(str(tmp_path), compression="AUTO")
    # As an older feedline wrote it: the chunks beside the manifest, which has no store id,
    # no checksums (store format 1) and names no save folder.
    manifest = json.loads((tmp_path / "dataset.json").read_text())
    for key in ("store_id", "checksums", "counts", "root", "manifest_checksum"):
        del manifest[key]
    manifest["format"] = 1
    legacy = tmp_path / "legacy"
    (legacy / "shard-00000").mkdir(parents=True)
    (legacy / "shard-00000" / "chunk-00000.flchunk").write_bytes(
        format_1_chunk([big(i) for i in range(3)]))
    (legacy / "dataset.json").write_text(json.dumps(manifest))
    assert_elements_equal(list(fl.Dataset.load(str(legacy))), [big(i) for i in range(3)])


@pytest.mark.parametrize("compression", [None, "AUTO"])
def test_saved_big_elements_load_as_views_and_resume_exactly(tmp_path, compression):
    expected = [big(i) for i in range(12)]
    fl.Dataset.range(12).map(big).save(str(tmp_path), compression=compression,
                                       checkpoint_args={"checkpoint_interval": 1 << 20})
    [saved] = tmp_path.glob("save-*")
    assert len(os.listdir(saved / "shard-00000")) == 3  # 4 elements (1.1 MB) a round
    got = list(fl.Dataset.load(str(tmp_path)))
    assert_elements_equal(got, expected)
    assert not any(e["board"].flags.owndata for e in got)
    with iter(fl.Dataset.load(str(tmp_path))) as it:
        head = [next(it) for _ in range(5)]
        state = it.state_dict()
    with iter(fl.Dataset.load(str(tmp_path))) as it:
        it.load_state_dict(state)
        rest = list(it)
    assert_elements_equal(head + rest, expected)


def test_a_chunk_that_cannot_be_mapped_is_read_into_memory(tmp_path, monkeypatch):
    elements = [big(0), small(1), big(2)]
    path = write_chunk(tmp_path, elements, "NONE")

    def no_map(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")  # as when vm.max_map_count is reached

    monkeypatch.setattr(chunks.mmap, "mmap", no_map)
    got = list(read_chunk(path)[1])
    assert_elements_equal(got, elements)
    assert isinstance(root(got[0]["board"]), bytearray)  # still views, into the read bytes
    assert got[0]["board"].flags.writeable and got[0]["board"].flags.aligned


@pytest.mark.parametrize("structure", [{"bogus": 1}, [1, 2], {"d": 3}])
def test_a_sound_chunk_with_a_bad_structure_is_data_loss_naming_it(structure):
    # A crafted chunk (its CRCs hold, its structure is nonsense) was a CheckpointError that
    # named no file.
    from feedline.snapshot.chunks import chunk_parts, decode_chunk, pack_frame

    parts = chunk_parts([pack_frame([b"abc"], 3, 1, "NONE")], "NONE", structure)
    with pytest.raises(fl.DataLossError, match="crafted.flchunk: damaged chunk header") as raised:
        list(decode_chunk("crafted.flchunk", b"".join(bytes(p) for p in parts))[1])
    assert raised.value.path == "crafted.flchunk"
