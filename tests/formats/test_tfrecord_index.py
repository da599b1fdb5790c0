"""Random access to TFRecord files through an index of record offsets."""

import json
import os
import shutil
from pathlib import Path

import fsspec
import numpy as np
import pytest

import feedline as fl
from feedline.formats.tfrecord_index import INDEX_SUFFIX, _encode, index_path, load_index

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "tfrecord"
RAW = [bytes.fromhex(h) for h in json.loads((GOLDEN / "raw.expected.json").read_text())[
    "records_hex"]]


@pytest.fixture
def golden(tmp_path):
    """The golden files, copied where their indexes may be written."""
    for name in os.listdir(GOLDEN):
        shutil.copy(GOLDEN / name, tmp_path / name)
    return tmp_path


def write(path, records):
    fl.write_tfrecord(fl.Dataset.from_tensor_slices(records), str(path))
    return str(path)


def test_golden_records_by_index(golden):
    for name in ("raw.tfrecord", "examples.tfrecord", "sequence_examples.tfrecord"):
        ds = fl.TFRecordDataset(str(golden / name))
        expected = list(ds)
        assert len(ds) == len(expected)
        assert [ds[i] for i in range(len(ds))] == expected
        assert ds[-1] == expected[-1]
    raw = fl.TFRecordDataset(str(golden / "raw.tfrecord"))
    assert [raw[i] for i in (4, 0, 3, 1, 2)] == [RAW[i] for i in (4, 0, 3, 1, 2)]
    assert os.path.isfile(index_path(str(golden / "raw.tfrecord")))
    assert not list(golden.glob("*" + INDEX_SUFFIX))  # nothing written beside the data
    # The offsets TensorFlow's framing gives: 5 records of 0, 1, 11, 256 and 70000 bytes.
    assert load_index(str(golden / "raw.tfrecord")).tolist() == [0, 16, 33, 60, 332, 70348]


def test_damaged_files_name_file_and_offset(golden):
    with pytest.raises(fl.DataLossError, match="truncated record at 332 in .*truncated.tfrecord"):
        len(fl.TFRecordDataset(str(golden / "truncated.tfrecord")))
    with pytest.raises(fl.DataLossError, match="corrupted record at 0 in .*corrupt_length"):
        fl.TFRecordDataset(str(golden / "corrupt_length.tfrecord"))[0]
    payload = fl.TFRecordDataset(str(golden / "corrupt_payload.tfrecord"))
    assert payload[0] == b""
    with pytest.raises(fl.DataLossError,
                       match=r"corrupted record at 28 in .*corrupt_payload.tfrecord \(record "
                             r"index 1, element 1\): the data's checksum") as raised:
        payload[1]
    assert raised.value.offset == 28
    assert payload[2] == b"hello world"


def test_compressed_files_have_no_random_access(golden):
    ds = fl.TFRecordDataset(str(golden / "raw.gz.tfrecord"), compression_type="GZIP")
    with pytest.raises(TypeError, match="ds\\[i\\] needs random access"):
        ds[0]
    with pytest.raises(TypeError, match="global_shuffle needs random access"):
        ds.global_shuffle(1)


def test_records_across_files(tmp_path):
    paths = [write(tmp_path / f"{f}.tfrecord", [f"{f}:{i}".encode() for i in range(f + 1)])
             for f in range(4)]
    ds = fl.TFRecordDataset(paths)
    expected = list(ds)
    assert len(ds) == 10
    assert [ds[i] for i in range(10)] == expected
    shuffled = list(ds.global_shuffle(seed=2))
    assert sorted(shuffled) == sorted(expected) and shuffled != expected


def test_stale_index_is_rebuilt(tmp_path):
    path = write(tmp_path / "a.tfrecord", [b"x", b"yy"])
    assert fl.TFRecordDataset(path)[1] == b"yy"
    os.utime(path, ns=(1, 1))  # same size, other time: the index no longer vouches for it
    write(tmp_path / "a.tfrecord", [b"p", b"q", b"r"])
    ds = fl.TFRecordDataset(path)
    assert len(ds) == 3 and ds[2] == b"r"


def test_damaged_index_is_rebuilt(tmp_path):
    path = write(tmp_path / "a.tfrecord", [b"x", b"yy", b"zzz"])
    load_index(path)
    index = Path(index_path(path))
    data = bytearray(index.read_bytes())
    data[-10] ^= 0xFF
    index.write_bytes(bytes(data))
    assert fl.TFRecordDataset(path)[2] == b"zzz"
    assert index.read_bytes() != bytes(data)  # written again, whole


def test_reading_writes_nothing_into_the_data_folder(tmp_path):
    # Issue 29.3: list(ds) and len(ds) wrote part-0.flidx beside part-0, and the next
    # list_files(folder + "/*") read the index as a TFRecord file (DataLossError).
    folder = tmp_path / "data"
    folder.mkdir()
    paths = [write(folder / f"part-{i}", [b"%d:%d" % (i, j) for j in range(3)]) for i in range(2)]
    ds = fl.TFRecordDataset(paths)
    assert len(ds) == 6 and ds[4] == b"1:1" and len(list(ds.global_shuffle(seed=1))) == 6
    assert sorted(os.listdir(folder)) == ["part-0", "part-1"]
    files = fl.Dataset.list_files(str(folder / "*"), shuffle=False)
    again = fl.TFRecordDataset(files)
    assert list(again) == [b"%d:%d" % (i, j) for i in range(2) for j in range(3)]


def test_indexes_go_to_the_xdg_cache_folder_by_default(tmp_path, monkeypatch):
    monkeypatch.delenv("FEEDLINE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    path = write(tmp_path / "a.tfrecord", [b"x", b"yy"])
    assert fl.TFRecordDataset(path)[1] == b"yy"
    assert index_path(path).startswith(str(tmp_path / "xdg" / "feedline" / "indexes") + os.sep)
    assert os.path.isfile(index_path(path))
    monkeypatch.setenv("FEEDLINE_CACHE_DIR", str(tmp_path / "mine"))
    assert index_path(path).startswith(str(tmp_path / "mine" / "indexes") + os.sep)


def test_an_unwritable_cache_folder_keeps_indexes_in_memory(tmp_path, monkeypatch):
    path = write(tmp_path / "a.tfrecord", [b"x", b"yy"])
    (tmp_path / "cache").write_bytes(b"")  # a file: no folder can be made there
    monkeypatch.setenv("FEEDLINE_CACHE_DIR", str(tmp_path / "cache"))
    assert fl.TFRecordDataset(path)[1] == b"yy"
    assert fl.TFRecordDataset(path)[0] == b"x"
    assert sorted(os.listdir(tmp_path)) == ["a.tfrecord", "cache"]


def test_remote_files_are_indexed_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEEDLINE_CACHE_DIR", str(tmp_path / "cache"))
    url = "memory://index-test/remote.tfrecord"
    write(url, [b"a", b"bb", b"ccc"])
    try:
        ds = fl.TFRecordDataset(url)
        assert [ds[i] for i in (2, 0, 1)] == [b"ccc", b"a", b"bb"]
        assert index_path(url).startswith(str(tmp_path / "cache" / "indexes"))
        assert os.path.exists(index_path(url))
    finally:
        fsspec.filesystem("memory").rm("/index-test", recursive=True)


def _forge_index(path, offsets):
    """An index of ``path`` whose CRC, size and time all check out, holding ``offsets``."""
    stat = os.stat(path)
    Path(index_path(path)).parent.mkdir(parents=True, exist_ok=True)
    Path(index_path(path)).write_bytes(_encode(np.asarray(offsets, np.int64), stat.st_size,
                                               stat.st_mtime_ns))


@pytest.mark.parametrize("offsets, message", [
    # A record of no bytes (was struct.error on reading it).
    ([0, 0, 18, 35], r"expected record 0 \(at byte 0\) to span at least 16 bytes .*found 0"),
    # Consistent but shortened: the last record hidden (was read silently).
    ([0, 18], r"expected the last record to end at the file's size, 35 bytes, found 18 "
              r"\(1 records\)"),
    ([5, 18, 35], "expected the first record at byte 0, found 5"),
])
def test_a_forged_index_is_data_loss_naming_both_files(tmp_path, offsets, message):
    path = write(tmp_path / "a.tfrecord", [b"ab", b"c"])
    _forge_index(path, offsets)
    with pytest.raises(fl.DataLossError, match=message) as raised:
        len(fl.TFRecordDataset(path))
    assert raised.value.path == index_path(path)
    assert str(path) in str(raised.value) and "delete the index" in str(raised.value)


def test_a_file_changed_after_indexing_is_data_loss(tmp_path):
    path = write(tmp_path / "a.tfrecord", [b"x" * 10] * 100)
    ds = fl.TFRecordDataset(path)
    it = iter(ds.global_shuffle(seed=0))
    next(it)  # reads a first chunk of records
    with open(path, "r+b") as file:
        file.truncate(100)
    with pytest.raises(fl.DataLossError, match="changed since it was indexed"):
        list(it)
    it.close()


@pytest.mark.parametrize("fast", [True, False])
def test_c_and_python_paths_agree(golden, monkeypatch, fast):
    from feedline.formats import tfrecord_index

    if fast and tfrecord_index._FAST is None:
        pytest.skip("the C extension was not built")
    if not fast:
        monkeypatch.setattr(tfrecord_index, "_FAST", None)
    raw = fl.TFRecordDataset([str(golden / "raw.tfrecord")] * 3)
    assert [raw[i] for i in range(15)] == RAW * 3
    assert list(raw.global_shuffle(seed=1)) == [RAW[i % 5] for i in
                                                shuffled_order(seed=1)]
    payload = fl.TFRecordDataset([str(golden / "raw.tfrecord"),
                                  str(golden / "corrupt_payload.tfrecord")])
    reader = tfrecord_index.TFRecordRandomReader(payload.filenames)
    assert reader.get_many([4, 5]) == [RAW[4], b""]
    with pytest.raises(fl.DataLossError, match="corrupted record at 28 .*element 6"):
        reader.get_many([0, 5, 6, 7])
    reader.close()


def shuffled_order(seed):  # the order global_shuffle(seed) reads 15 records in
    return [int(i) for i in fl.Dataset.range(15).global_shuffle(seed=seed)]


def test_c_crc_matches_google_crc32c():
    import google_crc32c

    from feedline.formats import tfrecord_index

    if tfrecord_index._FAST is None:
        pytest.skip("the C extension was not built")
    rng = np.random.default_rng(0)
    for size in (0, 1, 7, 8, 9, 63, 64, 65, 1000, 70_001):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert tfrecord_index._FAST.crc32c(data) == google_crc32c.value(data)
