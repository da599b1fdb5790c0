"""The hint that names a compressed file read without compression_type."""

import gzip
import zlib

import pytest

import feedline as fl
from feedline.core.errors import DataLossError
from feedline.formats.compression_hint import compression_hint, file_compression_hint
from feedline.formats.tfrecord import TFRecordWriter

GZIP = "this looks like a GZIP file; pass compression_type='GZIP'"
ZLIB = "this looks like a ZLIB file; pass compression_type='ZLIB'"


@pytest.mark.parametrize(("head", "hint"), [
    (gzip.compress(b"records"), GZIP),
    (zlib.compress(b"records"), ZLIB),
    (zlib.compress(b"records", 9), ZLIB),
    (zlib.compress(b"records", 1), ZLIB),
    (b"\x1f", ""),
    (b"", ""),
    (b"\x78\x00", ""),  # deflate, but the header check fails
    ((5).to_bytes(8, "little"), ""),  # an uncompressed TFRecord's length
])
def test_hint_of_the_first_bytes(head, hint):
    assert compression_hint(head) == hint


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_hint_of_a_compressed_tfrecord_file(tmp_path, compression):
    path = str(tmp_path / "data.tfrecord")
    with fl.TFRecordWriter(path, compression_type=compression) as writer:
        writer.write(b"example")
    assert file_compression_hint(path) == (GZIP if compression == "GZIP" else ZLIB)
    plain = str(tmp_path / "plain.tfrecord")
    with fl.TFRecordWriter(plain) as writer:
        writer.write(b"example")
    assert file_compression_hint(plain) == ""


def test_a_file_that_cannot_be_read_has_no_hint(tmp_path):
    assert file_compression_hint(str(tmp_path / "missing.tfrecord")) == ""


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
@pytest.mark.parametrize("as_dataset_of_names", [False, True])
def test_a_compressed_tfrecord_read_uncompressed_says_so(tmp_path, compression,
                                                          as_dataset_of_names):
    path = str(tmp_path / "records.tfrecord")
    with TFRecordWriter(path, compression_type=compression) as writer:
        for _ in range(3):
            writer.write(b"x" * 10)
    names = fl.Dataset.from_tensor_slices([path]) if as_dataset_of_names else path
    with pytest.raises(DataLossError, match=rf"at 0 in .*; this looks like a {compression} "
                                            rf"file; pass compression_type='{compression}'"):
        list(fl.TFRecordDataset(names))


def test_an_uncompressed_damaged_file_gets_no_hint(tmp_path):
    path = tmp_path / "records.tfrecord"
    path.write_bytes(b"\x05" * 40)
    with pytest.raises(DataLossError) as raised:
        list(fl.TFRecordDataset(str(path)))
    assert "looks like" not in str(raised.value)
