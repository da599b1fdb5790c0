"""Fuzz targets: the record formats (TFRecord, tf.train.Example, CSV, ArrayRecord, text lines,
fixed-length records).

Each reader is checked against an oracle written here, not only for how it fails: a damaged
input must raise a feedline error naming the file and the offset or record, and an input the
oracle reads whole must read to the same records (a reader that silently drops or changes
data fails). Several targets add structure-aware mutations on top of the harness's byte
mutations, seeded by the input's bytes (so a saved input replays exactly):

* ``tfrecord`` reads each file with the C reader, the Python reader and small buffers, which
  must agree; ``tfrecord_framed`` gives the mutated file's lengths and data valid masked
  CRCs, and often sets a length to an interesting value or cuts, drops or repeats a record,
  so damage reaches the framing instead of stopping at the first checksum.
* ``tfrecord_gzip`` / ``tfrecord_zlib``: compressed files damaged as bytes; the ``*_framed``
  variants frame-damage the records and compress them afterwards.
* ``tfrecord_random`` / ``tfrecord_random_framed``: random access (the record index, then
  reads in a shuffled order); ``tfrecord_index``: a damaged index file in the cache, its CRC,
  size and time mostly made right so that it is trusted.
* ``example``: serialized tf.train.Example protos damaged as bytes or on the wire (fields
  dropped, duplicated, renumbered, their wire type, varint values or lengths changed, the
  message kept well-formed), parsed with FixedLen/VarLen/FixedLenSequence/Ragged/Sparse specs
  by the C fast path and by the protobuf path, which must agree; ``sequence_example`` the
  same for SequenceExamples (protobuf path only).
* ``csv``, ``csv_selected``, ``csv_gzip``, ``make_csv``: CsvDataset and make_csv_dataset
  (header, type inference); ``array_record`` / ``array_record_random``: ArrayRecord files
  read in order and at random (skipped without the ``array_record`` package); ``text*`` and
  ``fixed_length*``: TextLineDataset and FixedLengthRecordDataset, plain and compressed.

Memory caps (``memory_cap_mib``: the child's peak RSS, including the interpreter, NumPy and
protobuf, about 55 MiB by themselves) are set per target below: 512 MiB, 768 MiB for
ArrayRecord. Peaks seen in 10,000-input runs: up to 220 MiB for uncompressed TFRecord (the C
reader's 1 MiB stores and glibc keeping freed memory; no growth after 2,000 inputs), 70 MiB
for everything else.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import random
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from fuzz_harness import FuzzTarget

import feedline as fl
from feedline.core.errors import DataLossError, FeedlineError
from feedline.formats import tfrecord as tfrecord_module
from feedline.formats.example import (
    ExampleParseError,
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    RaggedValues,
    SparseFeature,
    SparseValues,
    VarLenFeature,
    cbridge,
    encode_example,
    encode_sequence_example,
    parse_example,
    parse_sequence_example,
    parse_single_example,
    parse_single_sequence_example,
)


class OracleMismatch(AssertionError):
    """A reader's output differs from what the oracle reads (never an allowed error)."""


# ------------------------------------------------------------------------------ helpers
def _names_file(error: BaseException, scratch: Path | None) -> str | None:
    if getattr(error, "path", None) or "input." in str(error):
        return None
    return "the error does not name the file"


def _names_file_and_place(error: BaseException, scratch: Path | None) -> str | None:
    """The error names the file and where in it (an offset, a record, a line)."""
    lacking = _names_file(error, scratch)
    if lacking:
        return lacking
    if all(getattr(error, attribute, None) is None
           for attribute in ("offset", "record_index", "line")):
        return "the error names no offset, record or line"
    return None


def _seeded(data: bytes) -> random.Random:
    """A generator seeded by the input, so structure-aware damage replays from the input."""
    return random.Random(zlib.crc32(data))


# ---------------------------------------------------------------------------- TFRecord
_HEADER = struct.Struct("<QI")
_MASK = tfrecord_module.masked_crc32c


def _frame(record: bytes) -> bytes:
    length = struct.pack("<Q", len(record))
    return length + struct.pack("<I", _MASK(length)) + record + struct.pack("<I", _MASK(record))


def _tfrecord_files() -> list[bytes]:
    """Valid TFRecord files: empty, tiny records, an empty record, records across the C
    reader's direct-read size (16 KiB) and the Python reader's small buffers."""
    rng = random.Random(7)
    files = [
        b"",
        _frame(b""),
        b"".join(_frame(bytes([i]) * (i * 7 + 1)) for i in range(20)),
        b"".join(_frame(rng.randbytes(rng.choice((0, 1, 5, 100, 3000)))) for _ in range(40)),
        b"".join(_frame(rng.randbytes(n)) for n in (20_000, 3, 40_000, 0, 17_000)),
        b"".join(_frame(encode_example({"id": i, "w": [0.5] * i})) for i in range(30)),
    ]
    return files


def _tfrecord_corpus(folder: Path) -> list[bytes]:
    return _tfrecord_files()


def _oracle_tfrecord(data: bytes) -> tuple[list[bytes], int | None]:
    """The records of an uncompressed TFRecord stream and, if it is damaged, the index of
    the first record that is not whole and intact (``None``: the stream reads cleanly)."""
    records: list[bytes] = []
    position = 0
    while position < len(data):
        if len(data) - position < 12:
            return records, len(records)
        length, length_crc = _HEADER.unpack_from(data, position)
        if _MASK(data[position:position + 8]) != length_crc:
            return records, len(records)
        end = position + 12 + length + 4
        if end > len(data):
            return records, len(records)
        record = data[position + 12:end - 4]
        if _MASK(record) != struct.unpack_from("<I", data, end - 4)[0]:
            return records, len(records)
        records.append(record)
        position = end
    return records, None


def _fix_crcs(data: bytes) -> bytes:
    """``data`` with every length and every data checksum it frames made valid, walking the
    framing as a reader would (stops where the framing runs off the end)."""
    out = bytearray(data)
    position = 0
    while len(out) - position >= 12:
        out[position + 8:position + 12] = struct.pack("<I", _MASK(out[position:position + 8]))
        length = struct.unpack_from("<Q", out, position)[0]
        end = position + 12 + length + 4
        if end > len(out):
            break
        out[end - 4:end] = struct.pack("<I", _MASK(out[position + 12:end - 4]))
        position = end
    return bytes(out)


_INTERESTING_LENGTHS = (0, 1, 11, 12, 15, 16, 4095, 4096, 16383, 16384, 16385, 1 << 20,
                        (1 << 24) + 1, 1 << 26, (1 << 26) + 1, 1 << 31, 1 << 32, 1 << 62,
                        (1 << 63) - 1, 1 << 63, (1 << 64) - 1)


def _damage_framing(data: bytes, rng: random.Random) -> bytes:
    """One structural change to a TFRecord stream: a record's length set to an interesting
    or nearby value, a record cut, dropped or repeated; then every checksum made valid."""
    starts, position = [], 0
    while len(data) - position >= 12:
        length = struct.unpack_from("<Q", data, position)[0]
        starts.append(position)
        if position + 16 + length > len(data):
            break
        position += 16 + length
    if not starts:
        return _fix_crcs(data)
    at = rng.choice(starts)
    length = struct.unpack_from("<Q", data, at)[0]
    kind = rng.randrange(5)
    out = bytearray(data)
    if kind == 0:
        out[at:at + 8] = struct.pack("<Q", rng.choice(_INTERESTING_LENGTHS))
    elif kind == 1:
        new = max(0, min(length + rng.randint(-20, 20), (1 << 64) - 1))
        out[at:at + 8] = struct.pack("<Q", new)
    elif kind == 2:
        del out[at + rng.randint(0, min(length + 16, len(out) - at)):]
    elif kind == 3:
        del out[at:at + 16 + length]
    else:
        out[at:at] = out[at:at + 16 + length]
    return _fix_crcs(bytes(out))


def _read_all(dataset: Any) -> Iterator[Any]:
    iterator = iter(dataset)
    while True:
        try:
            yield next(iterator)
        except StopIteration:
            return


@contextlib.contextmanager
def _pure_python_tfrecord() -> Iterator[None]:
    """The TFRecord reader without its C framer (its Python path, which reports damage)."""
    saved = tfrecord_module._FRAMER, tfrecord_module._READ_FRAMES
    tfrecord_module._FRAMER = tfrecord_module._READ_FRAMES = None
    try:
        yield
    finally:
        tfrecord_module._FRAMER, tfrecord_module._READ_FRAMES = saved


def _check_tfrecord(path: Path, expected: list[bytes], bad: int | None,
                    compression: str | None, buffer_size: int | None) -> None:
    """Read ``path``; it must give ``expected`` then, if ``bad`` is set, an allowed error
    naming record ``bad`` (a compressed stream may also be damaged before its framing is)."""
    got: list[bytes] = []
    dataset = fl.TFRecordDataset(str(path), compression_type=compression,
                                 buffer_size=buffer_size)
    try:
        for record in _read_all(dataset):
            got.append(record)
    except FeedlineError as error:
        if got != expected[:len(got)]:
            raise OracleMismatch(f"records before the error differ from the oracle's "
                                 f"(buffer_size={buffer_size})") from error
        if bad is not None and len(got) == bad and getattr(error, "record_index", bad) != bad:
            raise OracleMismatch(f"the error names record {error.record_index}, the damage "
                                 f"is at record {bad}: {error}") from error
        if bad is None and compression is None:
            raise OracleMismatch(f"an intact file raised {error!r}") from error
        raise
    if bad is not None or got != expected:
        raise OracleMismatch(
            f"read {len(got)} records without an error; the oracle reads {len(expected)}"
            + (f" then damage at record {bad}" if bad is not None else "")
            + f" (buffer_size={buffer_size})")


def _read_tfrecord_plain(data: bytes, scratch: Path, compression: str | None = None,
                         frames: bytes | None = None) -> None:
    """Read ``data`` (a file, compressed as ``compression``) whose framing is ``frames``
    (default: ``data`` itself) with the C reader, the Python reader and a small buffer."""
    path = scratch / "input.tfrecord"
    path.write_bytes(data)
    if frames is None:
        frames = data
    expected, bad = _oracle_tfrecord(frames)
    errors = []
    for pure, buffer_size in ((False, None), (True, None), (False, 64), (True, 7)):
        with _pure_python_tfrecord() if pure else contextlib.nullcontext():
            try:
                _check_tfrecord(path, expected, bad, compression, buffer_size)
            except FeedlineError as error:
                errors.append(error)
    if errors:
        kinds = {type(error) for error in errors}
        if len(errors) != 4 or len(kinds) != 1:
            raise OracleMismatch(f"the readers disagree: {errors!r}")
        raise errors[0]


def _read_tfrecord(data: bytes, scratch: Path) -> None:
    _read_tfrecord_plain(data, scratch)


def _read_tfrecord_framed(data: bytes, scratch: Path) -> None:
    rng = _seeded(data)
    frames = _damage_framing(data, rng) if rng.random() < 0.7 else _fix_crcs(data)
    _read_tfrecord_plain(frames, scratch)


def _compress(data: bytes, compression: str) -> bytes:
    return gzip.compress(data, mtime=0) if compression == "GZIP" else zlib.compress(data)


def _oracle_decompress(data: bytes, compression: str) -> bytes | None:
    """The decompressed stream (concatenated members/streams), or None if it is damaged."""
    try:
        if compression == "GZIP":
            return gzip.decompress(data)
        out = []
        while data:
            decoder = zlib.decompressobj()
            out.append(decoder.decompress(data))
            if not decoder.eof:
                return None
            data = decoder.unused_data
        return b"".join(out)
    except (zlib.error, gzip.BadGzipFile, EOFError, OSError):
        return None


def _compressed_corpus(compression: str) -> Any:
    def corpus(folder: Path) -> list[bytes]:
        files = [_compress(f, compression) for f in _tfrecord_files()]
        # Two members/streams one after the other: a valid file too.
        files.append(files[2] + files[3])
        return files
    return corpus


def _read_compressed(compression: str) -> Any:
    def read(data: bytes, scratch: Path) -> None:
        plain = _oracle_decompress(data, compression)
        if plain is None:
            # Damaged compression: only how it fails is checked (records before the damage
            # are whatever decompressed before it).
            path = scratch / "input.tfrecord"
            path.write_bytes(data)
            for _ in _read_all(fl.TFRecordDataset(str(path), compression_type=compression)):
                pass
            raise OracleMismatch("damaged compressed data read without an error")
        _read_tfrecord_plain(data, scratch, compression, frames=plain)
    return read


def _read_compressed_framed(compression: str) -> Any:
    def read(data: bytes, scratch: Path) -> None:
        plain = _oracle_decompress(data, compression)
        if plain is None:
            plain = data  # a mutant of the compressed bytes: frame-damage the bytes as such
        rng = _seeded(data)
        frames = _damage_framing(plain, rng)
        _read_tfrecord_plain(_compress(frames, compression), scratch, compression, frames)
    return read


def _read_tfrecord_random(data: bytes, scratch: Path) -> None:
    """Random access (the record index, then reads in a shuffled order): records as the
    oracle reads them, or an error naming the file and the record."""
    from feedline.formats.tfrecord_index import TFRecordRandomReader

    os.environ["FEEDLINE_CACHE_DIR"] = str(scratch / "cache")  # emptied for every input
    path = scratch / "input.tfrecord"
    path.write_bytes(data)
    expected, bad = _oracle_tfrecord(data)
    try:
        with TFRecordRandomReader([str(path)]) as reader:
            order = list(range(len(reader)))
            _seeded(data).shuffle(order)
            got = reader.get_many(order)
    except FeedlineError as error:
        # Indexing checks the framing, reads the data: either names the damage, which no
        # record before the oracle's first damaged one has.
        if bad is None:
            raise OracleMismatch(f"an intact file raised {error!r}") from error
        if getattr(error, "record_index", None) is None or error.record_index < bad:
            raise OracleMismatch(f"the error names record {error.record_index}; the first "
                                 f"damaged one is {bad}: {error}") from error
        raise
    if bad is not None:
        raise OracleMismatch(f"read a damaged file without an error ({len(got)} records)")
    if got != [expected[i] for i in order]:
        raise OracleMismatch("random access reads other records than the oracle")


def _read_tfrecord_random_framed(data: bytes, scratch: Path) -> None:
    rng = _seeded(data)
    _read_tfrecord_random(_damage_framing(data, rng) if rng.random() < 0.7 else
                          _fix_crcs(data), scratch)


_INDEXED = 3  # which of _tfrecord_files() the index target's inputs index
_MTIME_NS = 1_700_000_000_123_456_789


def _index_corpus(folder: Path) -> list[bytes]:
    from feedline.formats.tfrecord_index import _encode

    data = _tfrecord_files()[_INDEXED]
    offsets = [0]
    while offsets[-1] < len(data):
        offsets.append(offsets[-1] + 16 + struct.unpack_from("<Q", data, offsets[-1])[0])
    return [_encode(np.array(offsets, dtype=np.int64), len(data), _MTIME_NS)]


def _read_index(data: bytes, scratch: Path) -> None:
    """A damaged record index (the cache's file) of an intact TFRecord file: mostly with its
    CRC, size and time made right, so that it is trusted; the records must still read as
    they are, or an error must name the index."""
    from feedline.formats.tfrecord_index import TFRecordRandomReader, index_path

    os.environ["FEEDLINE_CACHE_DIR"] = str(scratch / "cache")  # emptied for every input
    records = _tfrecord_files()[_INDEXED]
    path = scratch / "input.tfrecord"
    path.write_bytes(records)
    os.utime(path, ns=(_MTIME_NS, _MTIME_NS))
    rng = _seeded(data)
    if len(data) >= 36 and rng.random() < 0.9:
        body = bytearray(data[:-4])
        if rng.random() < 0.8:
            body[12:28] = struct.pack("<QQ", len(records), _MTIME_NS)
        if rng.random() < 0.3:  # the record count made to fit the offsets' bytes
            body[28:36] = struct.pack("<Q", max(0, (len(body) - 36) // 8 - 1))
        from feedline.formats.tfrecord_crc import crc32c

        data = bytes(body) + struct.pack("<I", crc32c(bytes(body)))
    location = Path(index_path(str(path)))
    location.parent.mkdir(parents=True, exist_ok=True)
    location.write_bytes(data)
    expected, _ = _oracle_tfrecord(records)
    with TFRecordRandomReader([str(path)]) as reader:
        order = list(range(len(reader)))
        rng.shuffle(order)
        got = reader.get_many(order)
    if len(order) != len(expected) or got != [expected[i] for i in order]:
        raise OracleMismatch("a damaged index read other records than the file holds")


# ------------------------------------------------------------------------ tf.train.Example
# The wire format, enough to mutate a message and write it back with consistent lengths.
def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("bad varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _parse_wire(data: bytes) -> list[list[Any]] | None:
    """``[[field, wire_type, value], ...]`` of a message (a value is an int for varints,
    bytes otherwise), or None if ``data`` is not a well-formed message."""
    fields, at = [], 0
    try:
        while at < len(data):
            tag, at = _read_varint(data, at)
            field, wire_type = tag >> 3, tag & 7
            if wire_type == 0:
                value, at = _read_varint(data, at)
            elif wire_type == 1:
                value, at = data[at:at + 8], at + 8
            elif wire_type == 2:
                length, at = _read_varint(data, at)
                value, at = data[at:at + length], at + length
            elif wire_type == 5:
                value, at = data[at:at + 4], at + 4
            else:
                return None
            if at > len(data) or field == 0:
                return None
            fields.append([field, wire_type, value])
    except ValueError:
        return None
    return fields


def _write_wire(fields: list[list[Any]]) -> bytes:
    out = bytearray()
    for field, wire_type, value in fields:
        out += _varint(field << 3 | wire_type)
        if wire_type == 0:
            out += _varint(value)
        elif wire_type == 2:
            out += _varint(len(value)) + value
        else:
            out += value
    return bytes(out)


_INTERESTING_VARINTS = (0, 1, 2, 3, 4, 127, 128, 255, 1 << 31, (1 << 31) - 1, 1 << 32,
                        (1 << 63) - 1, 1 << 63, (1 << 64) - 1, (1 << 64) - 2)


def _mutate_wire(data: bytes, rng: random.Random, depth: int = 0) -> bytes:
    """One wire-level change somewhere in the message tree, lengths kept consistent."""
    fields = _parse_wire(data)
    if fields is None:
        return data
    nested = [f for f in fields if f[1] == 2 and f[2] and _parse_wire(f[2])]
    if nested and depth < 6 and rng.random() < 0.75:
        chosen = rng.choice(nested)
        chosen[2] = _mutate_wire(chosen[2], rng, depth + 1)
        return _write_wire(fields)
    kind = rng.randrange(9)
    if not fields or kind == 0:  # a new field
        wire_type = rng.choice((0, 1, 2, 5))
        value = {0: rng.choice(_INTERESTING_VARINTS), 1: rng.randbytes(8),
                 2: rng.randbytes(rng.randrange(12)), 5: rng.randbytes(4)}[wire_type]
        fields.insert(rng.randint(0, len(fields)), [rng.choice((1, 1, 2, 3, 4, 99)),
                                                    wire_type, value])
        return _write_wire(fields)
    at = rng.randrange(len(fields))
    field = fields[at]
    if kind == 1:
        del fields[at]
    elif kind == 2:
        fields.insert(rng.randint(0, len(fields)), list(field))
    elif kind == 3:
        field[0] = rng.choice((1, 2, 3, 4, 5, 15, 16, 1 << 28, (1 << 29) - 1))
    elif kind == 4 and field[1] == 0:
        field[2] = rng.choice(_INTERESTING_VARINTS)
    elif kind == 4 and field[1] == 2:  # a packed run of interesting values, or floats
        if rng.random() < 0.5:
            field[2] = b"".join(_varint(rng.choice(_INTERESTING_VARINTS))
                                for _ in range(rng.randrange(5)))
        else:
            field[2] = rng.randbytes(4 * rng.randrange(4) + rng.choice((0, 0, 1, 3)))
    elif kind == 5 and field[1] == 2:  # payload cut or grown
        value = field[2]
        field[2] = value[:rng.randrange(len(value) + 1)] if rng.random() < 0.5 else \
            value + rng.randbytes(rng.randint(1, 6))
    elif kind == 6:  # another wire type, the value made to fit it
        wire_type = rng.choice((0, 1, 2, 5))
        raw = field[2] if isinstance(field[2], bytes) else _varint(field[2])
        field[1] = wire_type
        field[2] = {0: rng.choice(_INTERESTING_VARINTS), 1: (raw + bytes(8))[:8],
                    2: raw, 5: (raw + bytes(4))[:4]}[wire_type]
    elif kind == 7:
        fields[at], fields[-1] = fields[-1], fields[at]
    else:  # the same value with a non-canonical (over-long) varint encoding
        head = _varint(field[0] << 3 | field[1])
        if field[1] == 0:
            body = bytearray(_varint(field[2]))
            body[-1] |= 0x80
            body += b"\x00"
        elif field[1] == 2:
            body = bytearray(_varint(len(field[2])))
            body[-1] |= 0x80
            body += b"\x00" + field[2]
        else:
            body = bytearray(field[2])
        return _write_wire(fields[:at]) + head + bytes(body) + _write_wire(fields[at + 1:])
    return _write_wire(fields)


_LENIENT_SPEC = {
    "label": FixedLenFeature([], "int64", default_value=-1),
    "weights": FixedLenFeature([3], "float32", default_value=[0.0, 0.0, 0.0]),
    "name": FixedLenFeature([], "string", default_value=b"?"),
    "tokens": VarLenFeature("int64"),
    "words": VarLenFeature("string"),
    "scores": VarLenFeature("float32"),
    "frames": FixedLenSequenceFeature([2], "float32", allow_missing=True),
    "nested": RaggedFeature("int64", value_key="rv",
                            partitions=[RaggedFeature.RowLengths("rl")]),
    "by_splits": RaggedFeature("float32", value_key="sv",
                               partitions=[RaggedFeature.RowSplits("ss")]),
    "by_ids": RaggedFeature("string", value_key="iv",
                            partitions=[RaggedFeature.ValueRowIds("ids")]),
    "by_starts": RaggedFeature("int64", value_key="rv",
                               partitions=[RaggedFeature.RowStarts("starts"),
                                           RaggedFeature.UniformRowLength(1)]),
    "by_limits": RaggedFeature("int64", value_key="rv",
                               partitions=[RaggedFeature.RowLimits("limits")]),
    "sparse": SparseFeature(index_key="si", value_key="pv", dtype="float32", size=10),
}
_STRICT_SPEC = {
    "id": FixedLenFeature([], "int64"),
    "vector": FixedLenFeature([2, 2], "int64"),
    "name": FixedLenFeature([], "string"),
    "empty": FixedLenFeature([0], "float32"),
}

# Every key as a var-len feature of its type: any count is right, so the C path hands out
# results (its filling code) for most mutants, not only its scan before stepping aside.
_VAR_LEN_SPEC = {
    **{key: VarLenFeature("int64") for key in (
        "id", "vector", "label", "tokens", "rv", "rl", "ss", "ids", "starts", "limits", "si")},
    **{key: VarLenFeature("float32") for key in ("weights", "scores", "frames", "sv", "pv",
                                                 "empty")},
    **{key: VarLenFeature("string") for key in ("name", "words", "iv")},
}


def _example_records() -> list[bytes]:
    rng = random.Random(11)
    records = []
    for i in range(8):
        values = rng.sample(range(5), 2)
        records.append(encode_example({
            "id": i, "vector": [i, -i, 1 << 40, -(1 << 62)], "name": f"récord {i}",
            "empty": np.zeros(0, np.float32), "label": i % 3,
            "weights": [0.5, float("nan"), -1e30], "tokens": list(range(i)),
            "words": [b"a" * k for k in range(i % 4)], "scores": [1.5] * (i % 3),
            "frames": [0.25] * (2 * (i % 3)), "rv": [7, 8, 9], "rl": [2, 1],
            "sv": [1.0, 2.0], "ss": [0, 1, 2], "iv": [b"x", b"y"], "ids": [0, 2],
            "starts": [0, 1, 2], "limits": [1, 3], "si": values, "pv": [0.5, -0.5]}))
    # Valid but unusual encodings: unpacked numbers, a repeated key, a Features twice,
    # unknown fields, a feature without a list.
    records.append(encode_example({"id": 1, "name": b"", "vector": [1, 2, 3, 4],
                                   "empty": np.zeros(0, np.float32)})
                   + b"\x10\x05" + b"\x0a\x00")
    unpacked = _write_wire([[1, 2, _write_wire([[1, 2, _write_wire([
        [1, 2, b"tokens"], [2, 2, _write_wire([[3, 2, _write_wire(
            [[1, 0, 5], [1, 0, (1 << 64) - 1], [1, 0, 0]])]])]])],
        [1, 2, _write_wire([[1, 2, b"scores"], [2, 2, _write_wire([[2, 2, _write_wire(
            [[1, 5, struct.pack("<f", 2.5)], [1, 5, b"\x01\x00\x80\x7f"]])]])]])],
        [1, 2, _write_wire([[1, 2, b"label"], [2, 2, b""]])],
        [1, 2, _write_wire([[1, 2, b"label"], [2, 2, _write_wire([[3, 2, b"\x04"]])]])],
    ])]])
    records.append(unpacked)
    records.append(b"")
    return records


_EXAMPLES = _example_records()


def _example_corpus(folder: Path) -> list[bytes]:
    return list(_EXAMPLES)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(
            _same(a[k], b[k]) for k in a)
    if isinstance(a, RaggedValues):
        return isinstance(b, RaggedValues) and _same(a.values, b.values) and len(
            a.nested_row_splits) == len(b.nested_row_splits) and all(
            _same(x, y) for x, y in zip(a.nested_row_splits, b.nested_row_splits))
    if isinstance(a, SparseValues):
        return isinstance(b, SparseValues) and _same(a.indices, b.indices) and _same(
            a.values, b.values) and _same(np.asarray(a.dense_shape), np.asarray(b.dense_shape))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.dtype.kind == "f":
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.array_equal(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)
    return type(a) is type(b) and a == b


def _outcome(function: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", function(*args)
    except ExampleParseError as error:
        return "error", error


def _parse_both_ways(function: Any, *args: Any) -> Any:
    """``function(*args)`` through the C fast path and through protobuf: same result, or
    the same error (the C path steps aside to protobuf for every error)."""
    native = _outcome(function, *args)
    saved, cbridge.extension = cbridge.extension, None
    try:
        python = _outcome(function, *args)
    finally:
        cbridge.extension = saved
    if native[0] != python[0]:
        raise OracleMismatch(f"the C path gives {native!r}, protobuf {python!r}")
    if native[0] == "error":
        if str(native[1]) != str(python[1]):
            raise OracleMismatch(f"the paths raise differently: {native[1]} / {python[1]}")
        raise native[1]
    if not _same(native[1], python[1]):
        raise OracleMismatch(f"the C path and protobuf disagree: {native[1]!r} / {python[1]!r}")
    return native[1]


def _read_example(data: bytes, scratch: Path) -> None:
    rng = _seeded(data)
    if _parse_wire(data) is None and rng.random() < 0.5:
        # Byte damage broke the wire format (most of it does, and the parsers only scan such
        # a record): half of these start over from a valid record, damaged on the wire.
        data = rng.choice(_EXAMPLES)
    if rng.random() < 0.7:
        for _ in range(rng.randint(1, 3)):
            data = _mutate_wire(data, rng)
    errors: list[ExampleParseError] = []
    for spec in (_LENIENT_SPEC, _STRICT_SPEC, _VAR_LEN_SPEC):
        for index, batch in ((1, [_EXAMPLES[0], data, _EXAMPLES[1]]), (0, [data])):
            try:
                _parse_both_ways(parse_example, batch, spec)
            except ExampleParseError as error:
                if error.record_index != index:
                    raise OracleMismatch(f"the error names record {error.record_index}, the "
                                         f"damaged one is {index}: {error}") from error
                errors.append(error)
        try:
            _parse_both_ways(parse_single_example, data, spec)
        except ExampleParseError as error:
            errors.append(error)
    if errors:
        raise errors[0]


def _sequence_corpus(folder: Path) -> list[bytes]:
    return [encode_sequence_example({"n": i, "tag": b"t" * i},
                                    {"frames": [[0.5 * i, 1.0]] * i, "words": [[b"a"] * k
                                                                               for k in range(i)]})
            for i in range(5)] + [b""]


_SEQUENCE_CONTEXT = {"n": FixedLenFeature([], "int64", default_value=0),
                     "tag": VarLenFeature("string")}
_SEQUENCE_FEATURES = {"frames": FixedLenSequenceFeature([2], "float32", allow_missing=True),
                      "words": VarLenFeature("string")}


def _read_sequence_example(data: bytes, scratch: Path) -> None:
    rng = _seeded(data)
    if rng.random() < 0.6:
        for _ in range(rng.randint(1, 3)):
            data = _mutate_wire(data, rng)
    good = _sequence_corpus(scratch)[1]
    try:
        parse_sequence_example([good, data], _SEQUENCE_CONTEXT, _SEQUENCE_FEATURES)
    except ExampleParseError as error:
        if error.record_index != 1:
            raise OracleMismatch(f"the error names record {error.record_index}, the damaged "
                                 f"one is 1: {error}") from error
        raise
    parse_single_sequence_example(data, _SEQUENCE_CONTEXT, _SEQUENCE_FEATURES)


def _names_record(error: BaseException, scratch: Path | None) -> str | None:
    if getattr(error, "record_index", None) is None:
        return "the error names no record"
    return None


# ---------------------------------------------------------------------------------- CSV
_CSV_FILES = [
    b"id,score,name,flag\n1,0.5,alpha,7\n2,1e3,\"be,ta\",8\n3,-2.25,\"ga\"\"mma\",9\n",
    b"id,score,name,flag\n" + b"".join(b"%d,%d.5,n%d,%d\n" % (i, i, i, i % 2)
                                      for i in range(50)),
    b"id,score,name,flag\r\n10,,empty,\r\n11,NaN,\"multi\nline\",1\r\n12,inf,x,0",
    b"id,score,name,flag\n",
    b"id,score,name,flag\n-2147483648,3.4e38,\"\",-1\n2147483647,-0.0,\"q\"\"\",0\n",
]


def _csv_corpus(folder: Path) -> list[bytes]:
    return list(_CSV_FILES)


def _read_csv(data: bytes, scratch: Path) -> None:
    path = scratch / "input.csv"
    path.write_bytes(data)
    dataset = fl.CsvDataset(str(path), [np.int64, 0.0, b"", np.int32(0)], header=True)
    for _ in _read_all(dataset):
        pass


def _read_csv_selected(data: bytes, scratch: Path) -> None:
    path = scratch / "input.csv"
    path.write_bytes(data)
    dataset = fl.CsvDataset(str(path), [np.float64(-1), b"-"], header=True,
                            select_cols=[1, 2], na_value="NA", buffer_size=16)
    for _ in _read_all(dataset):
        pass


def _read_make_csv(data: bytes, scratch: Path) -> None:
    path = scratch / "input.csv"
    path.write_bytes(data)
    dataset = fl.make_csv_dataset(str(path), batch_size=4, num_epochs=1, shuffle=False,
                                  prefetch_buffer_size=0)
    for _ in _read_all(dataset):
        pass


def _csv_gzip_corpus(folder: Path) -> list[bytes]:
    return [_compress(f, "GZIP") for f in _CSV_FILES]


def _read_csv_gzip(data: bytes, scratch: Path) -> None:
    path = scratch / "input.csv.gz"
    data, plain = _plain_or_recompressed(data, "GZIP")
    path.write_bytes(data)
    dataset = fl.CsvDataset(str(path), [np.int64(0), 0.0, b"", np.int32(0)], header=True,
                            compression_type="GZIP", buffer_size=32)
    try:
        for _ in _read_all(dataset):
            pass
    except DataLossError:
        if plain is not None:
            raise OracleMismatch("intact compressed data raised DataLossError") from None
        raise
    if plain is None:
        raise OracleMismatch("damaged compressed data read without an error")


# --------------------------------------------------------------------------- ArrayRecord
def _array_record_corpus(folder: Path) -> list[bytes]:
    files = []
    for n, (count, size, options) in enumerate(
            ((1, 3, "group_size:1"), (20, 50, "group_size:1"), (40, 200, "group_size:8"),
             (5, 5000, "group_size:2,uncompressed"))):
        path = folder / f"seed{n}.array_record"
        rng = random.Random(n)
        fl.write_array_record(fl.Dataset.from_tensor_slices(
            np.array([rng.randbytes(size) for _ in range(count)], dtype=object)), str(path),
            options=options)
        files.append(path.read_bytes())
    return files


def _read_array_record(data: bytes, scratch: Path) -> None:
    path = scratch / "input.array_record"
    path.write_bytes(data)
    for _ in _read_all(fl.ArrayRecordDataset(str(path), block_size=7)):
        pass


def _read_array_record_random(data: bytes, scratch: Path) -> None:
    from feedline.formats.array_record import ArrayRecordRandomReader

    path = scratch / "input.array_record"
    path.write_bytes(data)
    reader = ArrayRecordRandomReader([str(path)])
    try:
        order = list(range(len(reader)))
        _seeded(data).shuffle(order)
        reader.get_many(order)
    finally:
        reader.close()


# ------------------------------------------------------------------ text and fixed length
_TEXT_FILES = [b"", b"one\ntwo\r\nthree", b"\n\n\r\n", b"a" * 3000 + b"\nb\r",
               bytes(range(256)) * 4, b"x\n" * 200]


def _text_corpus(compression: str | None) -> Any:
    def corpus(folder: Path) -> list[bytes]:
        if compression is None:
            return list(_TEXT_FILES)
        return [_compress(f, compression) for f in _TEXT_FILES]
    return corpus


def _plain_or_recompressed(data: bytes, compression: str | None) -> tuple[bytes, bytes | None]:
    """``(file, its decompressed bytes or None if damaged)``. Half of the inputs whose
    compression is damaged are taken as content and compressed, so that damaged content
    (any length, any bytes) reaches the reader through the decompressor too."""
    if compression is None:
        return data, data
    plain = _oracle_decompress(data, compression)
    if plain is None and _seeded(data).random() < 0.5:
        return _compress(data, compression), data
    return data, plain


def _read_text(compression: str | None) -> Any:
    def read(data: bytes, scratch: Path) -> None:
        path = scratch / "input.txt"
        data, plain = _plain_or_recompressed(data, compression)
        path.write_bytes(data)
        got = []
        try:
            for line in _read_all(fl.TextLineDataset(str(path), compression_type=compression,
                                                     buffer_size=64)):
                got.append(line)
        except FeedlineError:
            if plain is not None:
                raise OracleMismatch("intact data raised an error") from None
            raise
        if plain is None:
            raise OracleMismatch("damaged compressed data read without an error")
        lines = plain.split(b"\n")
        if lines and lines[-1].replace(b"\r", b"") == b"":
            lines.pop()
        if got != [line.replace(b"\r", b"") for line in lines]:
            raise OracleMismatch("lines differ from the oracle's")
    return read


def _fixed_corpus(compression: str | None) -> Any:
    def corpus(folder: Path) -> list[bytes]:
        files = [b"HEAD" + bytes(i % 256 for i in range(5 * k)) + b"FOOT!"
                 for k in (0, 1, 7, 60)]
        return files if compression is None else [_compress(f, compression) for f in files]
    return corpus


def _read_fixed(compression: str | None) -> Any:
    def read(data: bytes, scratch: Path) -> None:
        path = scratch / "input.bin"
        data, plain = _plain_or_recompressed(data, compression)
        path.write_bytes(data)
        got = []
        try:
            for record in _read_all(fl.FixedLengthRecordDataset(
                    str(path), record_bytes=5, header_bytes=4, footer_bytes=5, buffer_size=8,
                    compression_type=compression)):
                got.append(record)
        except FeedlineError:
            if plain is not None and (len(plain) - 9) >= 0 and (len(plain) - 9) % 5 == 0:
                raise OracleMismatch("a file that fits the record length raised") from None
            raise
        if plain is None or len(plain) < 9 or (len(plain) - 9) % 5:
            raise OracleMismatch("a file that does not fit the record length read cleanly")
        body = plain[4:len(plain) - 5]
        if got != [body[i:i + 5] for i in range(0, len(body), 5)]:
            raise OracleMismatch("records differ from the oracle's")
    return read


# ------------------------------------------------------------------------------ targets
_ALLOWED = (FeedlineError,)

TARGETS = {
    # TFRecord: a record is read into one buffer of at most its file's size; the corpus'
    # files are under 100 KiB, the reader's buffers 1 MiB (+ the C reader's store).
    "tfrecord": FuzzTarget(corpus=_tfrecord_corpus, read=_read_tfrecord, allowed=_ALLOWED,
                           where=_names_file_and_place, memory_cap_mib=512),
    "tfrecord_framed": FuzzTarget(corpus=_tfrecord_corpus, read=_read_tfrecord_framed,
                                  allowed=_ALLOWED, where=_names_file_and_place,
                                  memory_cap_mib=512),
    "tfrecord_gzip": FuzzTarget(corpus=_compressed_corpus("GZIP"),
                                read=_read_compressed("GZIP"), allowed=_ALLOWED,
                                where=_names_file_and_place, memory_cap_mib=512),
    "tfrecord_zlib": FuzzTarget(corpus=_compressed_corpus("ZLIB"),
                                read=_read_compressed("ZLIB"), allowed=_ALLOWED,
                                where=_names_file_and_place, memory_cap_mib=512),
    "tfrecord_gzip_framed": FuzzTarget(corpus=_compressed_corpus("GZIP"),
                                       read=_read_compressed_framed("GZIP"), allowed=_ALLOWED,
                                       where=_names_file_and_place, memory_cap_mib=512),
    "tfrecord_zlib_framed": FuzzTarget(corpus=_compressed_corpus("ZLIB"),
                                       read=_read_compressed_framed("ZLIB"), allowed=_ALLOWED,
                                       where=_names_file_and_place, memory_cap_mib=512),
    "tfrecord_random": FuzzTarget(corpus=_tfrecord_corpus, read=_read_tfrecord_random,
                                  allowed=_ALLOWED, where=_names_file_and_place,
                                  memory_cap_mib=512),
    "tfrecord_random_framed": FuzzTarget(corpus=_tfrecord_corpus,
                                         read=_read_tfrecord_random_framed, allowed=_ALLOWED,
                                         where=_names_file_and_place, memory_cap_mib=512),
    "tfrecord_index": FuzzTarget(corpus=_index_corpus, read=_read_index, allowed=_ALLOWED,
                                 where=_names_file, memory_cap_mib=512),
    # Example: outputs are bounded by the record's size (a few KiB here).
    "example": FuzzTarget(corpus=_example_corpus, read=_read_example, allowed=(
        ExampleParseError,), where=_names_record, memory_cap_mib=512),
    "sequence_example": FuzzTarget(corpus=_sequence_corpus, read=_read_sequence_example,
                                   allowed=(ExampleParseError,), where=_names_record,
                                   memory_cap_mib=512),
    # CSV: a record (and a field) is at most the file's size.
    "csv": FuzzTarget(corpus=_csv_corpus, read=_read_csv, allowed=_ALLOWED,
                      where=_names_file_and_place, memory_cap_mib=512),
    "csv_selected": FuzzTarget(corpus=_csv_corpus, read=_read_csv_selected, allowed=_ALLOWED,
                               where=_names_file_and_place, memory_cap_mib=512),
    "make_csv": FuzzTarget(corpus=_csv_corpus, read=_read_make_csv, allowed=_ALLOWED,
                           where=_names_file_and_place, memory_cap_mib=512),
    "csv_gzip": FuzzTarget(corpus=_csv_gzip_corpus, read=_read_csv_gzip, allowed=_ALLOWED,
                           where=_names_file_and_place, memory_cap_mib=512),
    # ArrayRecord: the C++ reader keeps a chunk (the files here are under 256 KiB).
    "array_record": FuzzTarget(corpus=_array_record_corpus, read=_read_array_record,
                               allowed=_ALLOWED, where=_names_file, memory_cap_mib=768),
    "array_record_random": FuzzTarget(corpus=_array_record_corpus,
                                      read=_read_array_record_random, allowed=_ALLOWED,
                                      where=_names_file, memory_cap_mib=768),
    # Text lines and fixed-length records: a line or record is at most the file's size.
    "text": FuzzTarget(corpus=_text_corpus(None), read=_read_text(None), allowed=_ALLOWED,
                       where=_names_file_and_place, memory_cap_mib=512),
    "text_gzip": FuzzTarget(corpus=_text_corpus("GZIP"), read=_read_text("GZIP"),
                            allowed=_ALLOWED, where=_names_file_and_place, memory_cap_mib=512),
    "text_zlib": FuzzTarget(corpus=_text_corpus("ZLIB"), read=_read_text("ZLIB"),
                            allowed=_ALLOWED, where=_names_file_and_place, memory_cap_mib=512),
    "fixed_length": FuzzTarget(corpus=_fixed_corpus(None), read=_read_fixed(None),
                               allowed=_ALLOWED, where=_names_file_and_place,
                               memory_cap_mib=512),
    "fixed_length_gzip": FuzzTarget(corpus=_fixed_corpus("GZIP"), read=_read_fixed("GZIP"),
                                    allowed=_ALLOWED, where=_names_file_and_place,
                                    memory_cap_mib=512),
}
