"""FixedLengthRecordDataset: tf.data's records, header/footer, compression, damage, checkpoints."""

import gzip
import zlib

import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.formats.fixed_length import FixedLengthRecordDataset
from feedline.testing import check_checkpointing


def write(path, data: bytes, compression=None):
    if compression == "GZIP":
        data = gzip.compress(data)
    elif compression == "ZLIB":
        data = zlib.compress(data)
    path.write_bytes(data)
    return str(path)


def drain(iterator):
    """Elements up to the first error, and that error (None at a clean end)."""
    out = []
    try:
        while True:
            out.append(next(iterator))
    except StopIteration:
        return out, None
    except Exception as error:  # noqa: BLE001 - the test inspects it
        return out, error


def test_tf_data_docstring_example(tmp_path):
    a = write(tmp_path / "fixed_length0.bin", b"HEADER012345FOOTER")
    b = write(tmp_path / "fixed_length1.bin", b"HEADER6789abFOOTER")
    ds = FixedLengthRecordDataset([a, b], record_bytes=2, header_bytes=6, footer_bytes=6)
    assert list(ds) == [b"01", b"23", b"45", b"67", b"89", b"ab"]


@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
@pytest.mark.parametrize("header, footer", [(0, 0), (3, 0), (0, 5), (4, 7)])
@pytest.mark.parametrize("buffer_size", [None, 1, 5])
def test_records_with_header_and_footer(tmp_path, compression, header, footer, buffer_size):
    records = [bytes([i]) * 3 for i in range(10)]
    data = b"H" * header + b"".join(records) + b"F" * footer
    path = write(tmp_path / "f.bin", data, compression)
    ds = FixedLengthRecordDataset(path, 3, header, footer, buffer_size, compression)
    assert list(ds) == records


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_empty_body_and_empty_file(tmp_path, compression):
    only_header_footer = write(tmp_path / "hf.bin", b"HHFF", compression)
    empty = write(tmp_path / "e.bin", b"", compression)
    assert list(FixedLengthRecordDataset(only_header_footer, 4, 2, 2,
                                         compression_type=compression)) == []
    assert list(FixedLengthRecordDataset(empty, 4, compression_type=compression)) == []


def test_filenames_dataset_and_spec(tmp_path):
    names = [write(tmp_path / f"{i}.bin", bytes([i]) * 4).encode() for i in range(3)]
    ds = FixedLengthRecordDataset(fl.Dataset.from_tensor_slices(names), 2)
    assert list(ds) == [b"\0\0", b"\0\0", b"\1\1", b"\1\1", b"\2\2", b"\2\2"]
    assert ds.element_spec == fl.TensorSpec((), np.dtype(object))
    assert ds.cardinality() == fl.UNKNOWN


def test_uncompressed_partial_record_fails_before_any_record_of_the_file(tmp_path):
    # tf.data checks the size of an uncompressed file when it opens it.
    bad = write(tmp_path / "bad.bin", b"HEADER0123456FOOTER")
    good = write(tmp_path / "good.bin", b"HEADERxyFOOTER")
    it = FixedLengthRecordDataset([bad, good], 2, 6, 6)._make_iterator(IteratorContext())
    records, error = drain(it)
    assert records == []
    # tf.data 2.21 raises InvalidArgumentError here ("... has body length 7 bytes, which is
    # not an exact multiple of the record length (2 bytes)"), not DataLossError.
    assert type(error) is fl.InvalidArgumentError and not isinstance(error, fl.DataLossError)
    assert (error.path, error.offset, error.record_index) == (bad, 12, 3)
    assert "body has 7 bytes" in str(error) and "record length (2 bytes)" in str(error)
    assert bad in str(error)
    assert list(it) == [b"xy"]  # the next call goes on with the next file
    it.close()


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_compressed_partial_record_fails_after_the_complete_records(tmp_path, compression):
    # A compressed file's size is only known at its end, as in tf.data.
    bad = write(tmp_path / "bad.z", b"HEADER0123456FOOTER", compression)
    good = write(tmp_path / "good.z", b"HEADERxyFOOTER", compression)
    it = FixedLengthRecordDataset([bad, good], 2, 6, 6, compression_type=compression) \
        ._make_iterator(IteratorContext())
    records, error = drain(it)
    assert records == [b"01", b"23", b"45"]
    assert type(error) is fl.DataLossError  # tf.data 2.21: DataLossError for a compressed file
    assert (error.path, error.offset, error.record_index) == (bad, 12, 3)
    assert list(it) == [b"xy"]
    it.close()


@pytest.mark.parametrize("compression, category", [(None, fl.InvalidArgumentError),
                                                    ("GZIP", fl.DataLossError)])
def test_file_shorter_than_header_and_footer(tmp_path, compression, category):
    # tf.data 2.21: InvalidArgumentError for an uncompressed file (its size is checked).
    path = write(tmp_path / "short.bin", b"HEAD", compression)
    with pytest.raises(category, match="short.bin") as info:
        list(FixedLengthRecordDataset(path, 2, 3, 3, compression_type=compression))
    assert info.value.path == path


def test_missing_file_names_the_path(tmp_path):
    missing = str(tmp_path / "nope.bin")
    with pytest.raises(FileNotFoundError, match="nope.bin"):
        list(FixedLengthRecordDataset(missing, 4))


@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
def test_checkpointing(tmp_path, compression):
    files = [write(tmp_path / "a.bin", b"HH" + b"abcdefgh" + b"FFF", compression),
             write(tmp_path / "b.bin", b"HH" + b"FFF", compression),
             write(tmp_path / "c.bin", b"HH" + b"ijkl" + b"FFF", compression)]
    ds = FixedLengthRecordDataset(files, 2, 2, 3, buffer_size=3, compression_type=compression)
    assert check_checkpointing(ds) == [b"ab", b"cd", b"ef", b"gh", b"ij", b"kl"]


def test_state_is_file_index_and_record_index(tmp_path):
    path = write(tmp_path / "a.bin", b"0123456789")
    with iter(FixedLengthRecordDataset([path], 2)) as it:
        next(it), next(it)
        state = it.state_dict()["root"]
        assert (state["file_index"], state["position"]) == (0, {"record": 2})


def test_bad_arguments():
    for kwargs, match in [({"record_bytes": 0}, "record_bytes"),
                          ({"record_bytes": 2, "header_bytes": -1}, "header_bytes"),
                          ({"record_bytes": 2, "compression_type": "LZ4"}, "compression_type")]:
        with pytest.raises(ValueError, match=match):
            FixedLengthRecordDataset("x", **kwargs)
    for kwargs, match in [({"record_bytes": 2, "footer_bytes": 1.5}, "footer_bytes"),
                          ({"record_bytes": True}, "record_bytes")]:
        with pytest.raises(TypeError, match=match):
            FixedLengthRecordDataset("x", **kwargs)


def test_num_parallel_reads(tmp_path):
    pytest.importorskip("feedline.transforms.interleave")
    files = [write(tmp_path / f"{i}.bin", bytes([65 + i]) * 2 * n)
             for i, n in enumerate([2, 1, 3])]
    ds = FixedLengthRecordDataset(files, 2, num_parallel_reads=2)
    assert list(ds) == [b"AA", b"BB", b"AA", b"CC", b"CC", b"CC"]
    check_checkpointing(ds)
