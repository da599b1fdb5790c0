"""The C reading paths of TFRecordDataset (``read_frames`` on a local file's descriptor,
``frame_records`` on any file object's reads) against the pure-Python path: the same
records, the same errors (message, file, offset, record index), the same checkpoint
positions after every record, for every record size and buffer size; and the C CRC32C
(SSE4.2 and table code) against google_crc32c."""

import os
import random
import struct
import subprocess
import sys

import fsspec
import google_crc32c
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.formats import tfrecord
from feedline.formats.tfrecord import TFRecordDataset, masked_crc32c
from feedline.testing import check_checkpointing

fast = pytest.importorskip("feedline.formats._tfrecord_fast",
                           reason="the optional C extension is not built")
if tfrecord._READ_FRAMES is None:
    pytest.skip("FEEDLINE_PURE_PYTHON is set: the C paths are disabled on purpose",
                allow_module_level=True)

PATHS = ["pread", "framer", "python"]
"""``pread``: read_frames on the descriptor (local files); ``framer``: frame_records on the
Python reads; ``python``: the one-record Python path alone (FEEDLINE_PURE_PYTHON=1)."""


@pytest.fixture(params=PATHS)
def path_kind(request, monkeypatch):
    if request.param in ("framer", "python"):
        monkeypatch.setattr(tfrecord, "_READ_FRAMES", None)
    if request.param == "python":
        monkeypatch.setattr(tfrecord, "_FRAMER", None)
    return request.param


def use_path(monkeypatch, kind):
    monkeypatch.setattr(tfrecord, "_READ_FRAMES", fast.read_frames if kind == "pread" else None)
    monkeypatch.setattr(tfrecord, "_FRAMER", None if kind == "python" else fast.frame_records)


def frame(record: bytes) -> bytes:
    length = struct.pack("<Q", len(record))
    return (length + struct.pack("<I", masked_crc32c(length)) + record
            + struct.pack("<I", masked_crc32c(record)))


def mixed_records(seed=0):
    """Sizes around every threshold: empty, chess-sized, the direct-read limit (16 KiB),
    the tail read behind a direct record (4 KiB), image-sized, larger than the buffer."""
    rng = random.Random(seed)
    sizes = [0, 1, 200, 240, 4095, 4096, 4097, 16383, 16384, 16385, 30_000, 49_000, 0, 57,
             60_000, 3 << 20, 12, 200_000, 245, 16_384, 65_536, 8]
    sizes += [rng.choice([rng.randrange(0, 300), rng.randrange(16_000, 70_000)])
              for _ in range(40)]
    return [rng.randbytes(n) for n in sizes]


@pytest.fixture(scope="module")
def mixed_file(tmp_path_factory):
    records = mixed_records()
    path = tmp_path_factory.mktemp("fast") / "mixed.tfrecord"
    path.write_bytes(b"".join(frame(r) for r in records))
    return str(path), records


def trace(dataset, chunk=0):
    """Every record or error the reader's iterator gives, each with the state after it;
    ``chunk`` > 0 reads through next_chunk(chunk) (the chunked serial path)."""
    iterator = dataset._make_iterator(IteratorContext())
    out = []
    try:
        while True:
            try:
                items = iterator.next_chunk(chunk) if chunk else [next(iterator)]
            except StopIteration:
                return out
            except fl.DataLossError as error:
                out.append((("error", str(error), error.path, error.offset, error.record_index),
                            iterator.state_dict()))
                continue
            state = iterator.state_dict()
            out.extend((item, state if i == len(items) - 1 else None)
                       for i, item in enumerate(items))
    finally:
        iterator.close()


def traces_of_every_path(monkeypatch, make_dataset, chunk=0):
    traces = {}
    for kind in PATHS:
        use_path(monkeypatch, kind)
        traces[kind] = trace(make_dataset(), chunk)
    return traces


# ------------------------------------------------------------------------------- CRC32C
def test_crc32c_matches_google_crc32c_at_every_length_and_alignment():
    rng = random.Random(7)
    block = rng.randbytes(300_000)
    lengths = list(range(800)) + [3 * 256 - 1, 3 * 256, 3 * 8192 - 1, 3 * 8192,
                                     3 * 8192 + 1, 6 * 8192 + 768, 49_000, 250_000]
    lengths += [rng.randrange(0, 290_000) for _ in range(60)]
    for length in lengths:
        start = rng.randrange(0, 9)
        data = block[start:start + length]
        expected = google_crc32c.value(data)
        assert fast.crc32c(data) == expected, length
        assert fast.crc32c_portable(data) == expected, length
        assert fast.crc32c(memoryview(block)[start:start + length]) == expected, length


def test_crc32c_known_values():
    # RFC 3720 (iSCSI) test vectors.
    assert fast.crc32c(bytes(32)) == fast.crc32c_portable(bytes(32)) == 0x8A9136AA
    assert fast.crc32c(b"\xff" * 32) == 0x62A8AB43
    assert fast.crc32c(bytes(range(32))) == 0x46DD794E
    assert fast.crc32c(b"") == 0
    assert isinstance(fast.hardware_crc(), bool)


# --------------------------------------------------------------------- identical records
@pytest.mark.parametrize("buffer_size", [None, 0, 1, 13, 1000, 5000, 20_000, 70_000])
def test_mixed_sizes_every_path_gives_the_same_records_and_states(monkeypatch, mixed_file,
                                                                  buffer_size):
    path, records = mixed_file
    traces = traces_of_every_path(
        monkeypatch, lambda: TFRecordDataset(path, buffer_size=buffer_size))
    assert [item for item, _ in traces["python"]] == records
    assert traces["pread"] == traces["python"]
    assert traces["framer"] == traces["python"]


@pytest.mark.parametrize("chunk", [1, 3, 64, 1000])
def test_chunked_reads_give_the_same_records_and_states(monkeypatch, mixed_file, chunk):
    path, records = mixed_file
    traces = traces_of_every_path(monkeypatch, lambda: TFRecordDataset([path, path]), chunk)
    assert [item for item, _ in traces["python"]] == records * 2
    # Chunks may be cut elsewhere ("up to limit" records each); where a path's chunk ends,
    # its state is the one-record path's after as many records.
    python = traces["python"]
    assert all(state is not None for _, state in python)  # one record a chunk there
    for kind in ("pread", "framer"):
        assert [item for item, _ in traces[kind]] == records * 2
        ends = [i for i, (_, state) in enumerate(traces[kind]) if state is not None]
        assert ends[-1] == len(python) - 1
        assert all(traces[kind][i][1] == python[i][1] for i in ends), kind
    if chunk > 1:
        assert len(ends) < len(python)  # the C paths hand out several records a call


def test_golden_files_every_path(monkeypatch, golden_dir):
    names = ["raw.tfrecord", "examples.tfrecord", "sequence_examples.tfrecord",
             "corrupt_payload.tfrecord", "corrupt_length.tfrecord", "truncated.tfrecord"]
    paths = [str(golden_dir / name) for name in names]
    for buffer_size in (None, 0, 7, 100):
        traces = traces_of_every_path(
            monkeypatch, lambda: TFRecordDataset(paths, buffer_size=buffer_size))
        assert traces["pread"] == traces["python"] == traces["framer"]
        errors = [item for item, _ in traces["pread"] if isinstance(item, tuple)]
        assert [e[2:] for e in errors] == [(paths[3], 28, 1), (paths[4], 0, 0),
                                           (paths[5], 332, 4)]


def test_the_c_reader_is_used_for_local_files_only(mixed_file):
    path, _ = mixed_file
    reader = tfrecord._FileReader(path, "", 1 << 20)
    assert reader._fd is not None
    reader.close()
    with fl.TFRecordWriter("memory://fast/one.tfrecord") as writer:
        writer.write(b"x")
    reader = tfrecord._FileReader("memory://fast/one.tfrecord", "", 1 << 20)
    assert reader._fd is None and reader.read() == b"x"
    reader.close()


# ---------------------------------------------------------------------------- damage
def damaged_variants(records):
    """(name, file bytes) for a flipped byte in each part of a small and a large record
    and truncations inside each part, plus the framing offsets of each record."""
    blob = b"".join(frame(r) for r in records)
    starts, at = [], 0
    for r in records:
        starts.append(at)
        at += 16 + len(r)
    variants = []
    for index in (1, 3):  # a 200-byte and a 50 kB record
        start, length = starts[index], len(records[index])
        parts = {"length": start + 3, "length_crc": start + 9, "data": start + 12 + length // 2,
                 "data_first": start + 12, "data_last": start + 11 + length,
                 "data_crc": start + 13 + length}
        for part, position in parts.items():
            damaged = bytearray(blob)
            damaged[position] ^= 0x10
            variants.append((f"flip-{index}-{part}", bytes(damaged)))
        for cut in (start + 5, start + 12, start + 13, start + 12 + length // 2,
                    start + 12 + length, start + 14 + length):
            variants.append((f"cut-{index}-{cut - start}", blob[:cut]))
    variants.append(("cut-end-header", blob + frame(b"abc")[:7]))
    return variants


@pytest.mark.parametrize("buffer_size", [None, 0, 9, 4096, 60_000])
def test_damage_gives_the_same_errors_on_every_path(monkeypatch, tmp_path, buffer_size):
    rng = random.Random(3)
    records = [rng.randbytes(n) for n in (100, 200, 30, 50_000, 70, 20_000)]
    good = tmp_path / "good.tfrecord"
    good.write_bytes(b"".join(frame(r) for r in records))
    for name, data in damaged_variants(records):
        damaged = tmp_path / f"{name}.tfrecord"
        damaged.write_bytes(data)
        paths = [str(damaged), str(good)]
        traces = traces_of_every_path(
            monkeypatch, lambda: TFRecordDataset(paths, buffer_size=buffer_size))
        assert traces["pread"] == traces["python"], name
        assert traces["framer"] == traces["python"], name
        items = [item for item, _ in traces["python"]]
        errors = [item for item in items if isinstance(item, tuple)]
        assert len(errors) == 1, name  # the damaged file ends; the good one reads whole
        assert items[-len(records):] == records
        kind = "truncated" if name.startswith("cut") else "corrupted"
        assert errors[0][1].startswith(f"{kind} record at {errors[0][3]} in {paths[0]}")


def test_a_checksummed_huge_length_is_truncation_not_an_allocation(monkeypatch, tmp_path):
    length = struct.pack("<Q", 1 << 40)
    path = tmp_path / "huge.tfrecord"
    path.write_bytes(frame(b"ok") + length + struct.pack("<I", masked_crc32c(length)) + b"x" * 100)
    traces = traces_of_every_path(monkeypatch, lambda: TFRecordDataset(str(path)))
    assert traces["pread"] == traces["python"] == traces["framer"]
    (first, _), (error, _) = traces["pread"]
    assert first == b"ok"
    assert error[1].startswith(f"truncated record at 18 in {path}") and error[3:] == (18, 1)


@pytest.mark.parametrize("where", ["local", "memory"])
def test_a_record_longer_than_one_bounded_read_is_read_whole(monkeypatch, tmp_path, where):
    # The one-record path (fsspec files, FEEDLINE_PURE_PYTHON, damage) reads at most 16 MiB
    # at a time: a longer record was reported as truncated though the file holds it.
    records = [b"a" * 10, random.Random(3).randbytes(20 << 20), b"b"]
    data = b"".join(frame(r) for r in records)
    if where == "local":
        path = str(tmp_path / "long.tfrecord")
        with open(path, "wb") as f:
            f.write(data)
    else:
        path = "memory://fast/long.tfrecord"
        fsspec.filesystem("memory").pipe(path, data)
    traces = traces_of_every_path(monkeypatch, lambda: TFRecordDataset(path, buffer_size=64))
    for kind, got in traces.items():
        assert [item for item, _ in got] == records, kind


def test_a_checksummed_long_length_allocates_no_more_than_the_file_holds(monkeypatch,
                                                                          tmp_path):
    # A damaged length of 24 MB (its checksum right) in a 1 KiB file: the Python path
    # allocated (and zeroed) a 16 MiB buffer to read it, for every such file.
    length = struct.pack("<Q", 24_000_000)
    path = tmp_path / "long.tfrecord"
    path.write_bytes(frame(b"ok") + length + struct.pack("<I", masked_crc32c(length))
                     + b"x" * 1000)
    for kind in PATHS:
        use_path(monkeypatch, kind)
        reader = tfrecord._FileReader(str(path), "", 4096)
        try:
            assert reader.read() == b"ok"
            with pytest.raises(fl.DataLossError, match="truncated record at 18"):
                reader.read()
            assert reader._store is None or len(reader._store) <= 4096 + 1100, kind
        finally:
            reader.close()


def test_a_file_that_grows_is_read_to_its_new_end(tmp_path):
    # pread reads what the file holds when it reads: records appended after the reader
    # opened the file (a writer still at work) are read, as with the file object.
    path = tmp_path / "growing.tfrecord"
    path.write_bytes(frame(b"a" * 20_000))
    with iter(TFRecordDataset(str(path))) as iterator:
        assert next(iterator) == b"a" * 20_000
        with open(path, "ab") as f:
            f.write(frame(b"b" * 30_000) + frame(b"c"))
        assert list(iterator) == [b"b" * 30_000, b"c"]


# -------------------------------------------------------------------------- checkpoints
@pytest.mark.parametrize("buffer_size", [None, 13, 20_000])
def test_checkpointing_large_and_small_records(mixed_file, buffer_size):
    path, _ = mixed_file
    check_checkpointing(TFRecordDataset([path], buffer_size=buffer_size))


def test_restored_position_reads_the_same_on_every_path(monkeypatch, mixed_file):
    path, records = mixed_file
    for kind in PATHS:
        use_path(monkeypatch, kind)
        with iter(TFRecordDataset(path)) as iterator:
            for _ in range(9):
                next(iterator)
            state = iterator.state_dict()
        for other in PATHS:
            use_path(monkeypatch, other)
            with iter(TFRecordDataset(path)) as iterator:
                iterator.load_state_dict(state)
                assert list(iterator) == records[9:], (kind, other)


# ------------------------------------------------------------------------------ the C API
def test_read_frames_rejects_inconsistent_positions(mixed_file):
    path, _ = mixed_file
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(ValueError, match="at least 16 bytes"):
            fast.read_frames(fd, bytearray(8), 0, 0, 0, 1, 1 << 20)
        with pytest.raises(ValueError, match="pos <= valid"):
            fast.read_frames(fd, bytearray(64), 5, 2, 10, 1, 1 << 20)
        with pytest.raises(TypeError):
            fast.read_frames(fd, b"read-only store ....", 0, 0, 0, 1, 1 << 20)
        records, pos, valid, file_pos = fast.read_frames(fd, bytearray(64), 0, 0, 0, 2, 1 << 20)
        assert records == mixed_records()[:2] and file_pos - valid + pos == 16 + 17
    finally:
        os.close(fd)


def test_read_frames_reads_a_large_record_past_a_small_store(tmp_path):
    # A record >= 16 KiB goes straight into its bytes object: a 64-byte store suffices,
    # and what follows it (the next record) is read behind it.
    path = tmp_path / "direct.tfrecord"
    big = random.Random(5).randbytes(20_000)
    path.write_bytes(frame(big) + frame(b"next"))
    fd = os.open(path, os.O_RDONLY)
    try:
        store = bytearray(64)
        records, pos, valid, file_pos = fast.read_frames(fd, store, 0, 0, 0, 1, 1 << 20)
        assert records == [big] and file_pos - valid + pos == 20_016
        records, pos, valid, file_pos = fast.read_frames(fd, store, pos, valid, file_pos, 5,
                                                         1 << 20)
        assert records == [b"next"] and file_pos - valid + pos == 20_036
        # A damaged byte in the data: nothing handed out, the store emptied at its start.
        damaged = bytearray(frame(big))
        damaged[5000] ^= 1
        path.write_bytes(bytes(damaged))
        assert fast.read_frames(fd, store, 0, 0, 0, 5, 1 << 20) == ([], 0, 0, 0)
    finally:
        os.close(fd)


def test_read_frames_on_a_bad_descriptor_leaves_the_error_to_python():
    records, pos, valid, file_pos = fast.read_frames(-1, bytearray(64), 0, 0, 0, 5, 1 << 20)
    assert (records, pos, valid, file_pos) == ([], 0, 0, 0)


def test_pure_python_setting_disables_the_c_readers(tmp_path):
    path = tmp_path / "p.tfrecord"
    path.write_bytes(frame(b"z" * 20_000) + frame(b"y"))
    code = ("import sys; from feedline.formats import tfrecord as t; import feedline as fl;"
            "assert t._READ_FRAMES is None and t._FRAMER is None;"
            f"assert list(fl.TFRecordDataset({str(path)!r})) == [b'z' * 20000, b'y']")
    env = {**os.environ, "FEEDLINE_PURE_PYTHON": "1"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_fsspec_memory_files_keep_the_framer(monkeypatch):
    records = mixed_records(1)[:12]
    fsspec.filesystem("memory").pipe("/fast/mixed.tfrecord", b"".join(map(frame, records)))
    traces = traces_of_every_path(
        monkeypatch, lambda: TFRecordDataset("memory://fast/mixed.tfrecord", buffer_size=5000))
    assert traces["pread"] == traces["python"] == traces["framer"]
    assert [item for item, _ in traces["pread"]] == records
