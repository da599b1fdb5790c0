"""open_file(): fsspec paths, GZIP/ZLIB streaming both ways, damaged data as DataLossError."""

import errno
import gzip
import os
import zlib
from pathlib import Path

import fsspec
import numpy as np
import pytest

import feedline as fl
from feedline.formats.files import compression_name, open_file, path_name

DATA = os.urandom(200_000) + b"compressible " * 20_000


@pytest.fixture(params=["local", "memory"])
def location(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "data.bin")
    return f"memory://files-tests/{request.node.name}.bin"


@pytest.mark.parametrize("compression", [None, "", "GZIP", "ZLIB", "gzip"])
def test_round_trip(location, compression):
    with open_file(location, "wb", compression) as f:
        f.write(DATA[:10])
        f.flush()
        f.write(DATA[10:])
    with open_file(location, "rb", compression) as f:
        assert f.read() == DATA
    with open_file(location, "rb", compression) as f:
        pieces = iter(lambda: f.read(4099), b"")
        assert b"".join(pieces) == DATA


def test_formats_are_the_standard_ones(location):
    with open_file(location, "wb", "GZIP") as f:
        f.write(DATA)
    raw = fsspec.open(location, "rb").open().read()
    assert gzip.decompress(raw) == DATA
    with open_file(location, "wb", "ZLIB") as f:
        f.write(DATA)
    raw = fsspec.open(location, "rb").open().read()
    assert zlib.decompress(raw) == DATA


def test_reads_what_the_standard_library_writes(location):
    for compression, compress in [("GZIP", gzip.compress), ("ZLIB", zlib.compress)]:
        with fsspec.open(location, "wb") as f:
            f.write(compress(DATA))
        with open_file(location, "rb", compression) as f:
            assert f.read() == DATA


def test_concatenated_streams_read_as_one(location):
    with fsspec.open(location, "wb") as f:
        f.write(zlib.compress(b"ab") + zlib.compress(b"cd"))
    assert open_file(location, "rb", "ZLIB").read() == b"abcd"
    with fsspec.open(location, "wb") as f:
        f.write(gzip.compress(b"ab") + gzip.compress(b"cd"))
    assert open_file(location, "rb", "GZIP").read() == b"abcd"


@pytest.mark.timeout(60)
def test_a_zlib_stream_ending_at_a_full_read_goes_on_with_the_next(location):
    # A first stream longer than one read (1 MiB of output) ends while the next stream's
    # bytes wait: the decoder keeps them as both its unused data and (a CPython quirk) its
    # unconsumed tail, which the reader took for more of the first stream, forever.
    first, second = b"a" * (3 << 20) + b"\n", b"b\n" * 10
    with fsspec.open(location, "wb") as f:
        f.write(zlib.compress(first) + zlib.compress(second))
    assert open_file(location, "rb", "ZLIB").read() == first + second
    lines = list(fl.TextLineDataset(location, compression_type="ZLIB", buffer_size=64))
    assert lines == [first[:-1]] + [b"b"] * 10
    # Bytes after a stream that are not another stream are damage, not the end of the data.
    with fsspec.open(location, "wb") as f:
        f.write(zlib.compress(first) + b"garbage")
    with pytest.raises(fl.DataLossError) as info:
        open_file(location, "rb", "ZLIB").read()
    assert info.value.path == location and info.value.offset == len(first)


@pytest.mark.parametrize("compression, compress", [("GZIP", gzip.compress),
                                                   ("ZLIB", zlib.compress)])
def test_damaged_compressed_data_is_data_loss(location, compression, compress):
    packed = compress(DATA)
    with fsspec.open(location, "wb") as f:
        f.write(packed[:len(packed) // 2])
    with open_file(location, "rb", compression) as f:
        got = b""
        with pytest.raises(fl.DataLossError) as info:
            while chunk := f.read1(1 << 16):
                got += chunk
    assert info.value.path == location and info.value.offset == len(got)
    assert DATA.startswith(got) and len(got) > 0  # what decoded before the cut came first
    with fsspec.open(location, "wb") as f:
        f.write(b"\x00" * 100)
    with pytest.raises(fl.DataLossError, match="damaged compressed data"):
        open_file(location, "rb", compression).read()


def test_text_modes(location):
    with open_file(location, "wt", "GZIP") as f:
        f.write("a\nb\r\nc")
    with open_file(location, "rt", "GZIP", newline="") as f:
        assert f.readlines() == ["a\n", "b\r\n", "c"]


def test_uncompressed_reads_are_seekable(location):
    with open_file(location, "wb") as f:
        f.write(b"0123456789")
    with open_file(location, "rb") as f:
        f.seek(4)
        assert f.read(3) == b"456"


def test_errors():
    with pytest.raises(ValueError, match="compression_type"):
        compression_name("LZ4")
    with pytest.raises(ValueError, match="mode"):
        open_file("memory://x", "r+b")
    with pytest.raises(FileNotFoundError):
        open_file("memory://files-tests/does-not-exist", "rb")
    with pytest.raises(TypeError, match="file name"):
        path_name(3)


def test_path_name():
    assert path_name(b"a/b") == "a/b"
    assert path_name(np.array(b"x", dtype=object)) == "x"
    assert path_name(np.bytes_(b"y")) == "y"
    import pathlib

    assert path_name(pathlib.Path("p/q")) == "p/q"


# ------------------------------------------------------- errors name the file as it was given
def _write_tfrecord(path):
    with fl.TFRecordWriter(path) as writer:
        writer.write(b"record")


def _write_parquet(path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"x": [1, 2]}), path)


# reader name -> (make a reader of `names` with num_parallel_reads, write one good file)
READERS = {
    "TFRecordDataset": (lambda names, n: fl.TFRecordDataset(names, num_parallel_reads=n),
                        _write_tfrecord),
    "TextLineDataset": (lambda names, n: fl.TextLineDataset(names, num_parallel_reads=n),
                        lambda path: Path(path).write_bytes(b"a\nb\n")),
    "FixedLengthRecordDataset": (
        lambda names, n: fl.FixedLengthRecordDataset(names, 2, num_parallel_reads=n),
        lambda path: Path(path).write_bytes(b"abcd")),
    "CsvDataset": (lambda names, n: fl.CsvDataset(names, [0], num_parallel_reads=n),
                   lambda path: Path(path).write_bytes(b"1\n2\n")),
    # ParquetDataset has no num_parallel_reads (neither has tf.data a Parquet reader).
    "ParquetDataset": (lambda names, n: fl.ParquetDataset(names), _write_parquet),
}


def _first_error(dataset) -> BaseException:
    with iter(dataset) as iterator:
        try:
            for _ in iterator:
                pass
        except Exception as error:  # noqa: BLE001 - the error is what the test checks
            return error
    pytest.fail("the dataset raised no error")


@pytest.mark.parametrize("parallel", [None, 2])
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_missing_file_is_named_as_given(reader, parallel, tmp_path, monkeypatch):
    make, write = READERS[reader]
    if parallel and reader == "ParquetDataset":
        pytest.skip("ParquetDataset reads its files one after the other")
    monkeypatch.chdir(tmp_path)
    write("good")
    os.mkdir("folder")
    url = (tmp_path / "gone").as_uri()  # file:///...: fsspec would report it without file://
    for missing in ["missing", url, ""]:
        error = _first_error(make(["good", missing], parallel))
        assert type(error) is FileNotFoundError
        # Named by its path, as given, not "file 0" (each parallel read is a one-file
        # reader) nor the working directory ("" resolves to it).
        assert str(error) == f"[Errno 2] {reader}: no such file: {missing!r}"
        assert error.filename == missing and error.errno == errno.ENOENT
    error = _first_error(make(["good", "folder"], parallel))
    assert isinstance(error, IsADirectoryError) and error.filename == "folder"
    assert str(error).endswith(": 'folder'")


def test_open_file_names_the_path_as_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ["", "missing.bin", (tmp_path / "gone.bin").as_uri()]:
        with pytest.raises(FileNotFoundError) as info:
            open_file(name, "rb")
        assert info.value.filename == name and info.value.errno == errno.ENOENT
    with pytest.raises(FileNotFoundError) as info:
        open_file("", "wb")  # not the working directory
    assert info.value.filename == ""
