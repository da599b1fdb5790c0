"""The hint that names a compressed file read without compression_type."""

import gzip
import zlib

import pytest

import feedline as fl
from feedline.formats.compression_hint import compression_hint, file_compression_hint

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
