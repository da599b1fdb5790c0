"""WebDataset: crafted tar size fields (issue 41, defect 5). A size the file cannot hold is a
truncated archive naming the shard, the member and its header's offset, found before
anything is allocated or sought by it; plain and gzip-compressed shards alike."""

import gzip
import io
import json
import subprocess
import sys
import tarfile

import pytest

import feedline as fl

MEMBERS = [("a.txt", b"x" * 10), ("a.cls", b"1"), ("b.txt", b"y" * 700), ("b.cls", b"2"),
           ("c.txt", b"z")]


def archive(fmt=tarfile.USTAR_FORMAT):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name, data in MEMBERS:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return bytearray(buffer.getvalue())


def header_offsets(data):
    with tarfile.open(fileobj=io.BytesIO(bytes(data))) as tar:
        return {member.name: member.offset for member in tar.getmembers()}


def with_size(data, at, field):
    """``data`` with the size field of the header at ``at`` replaced, checksum recomputed so
    the damage passes the header check."""
    data = bytearray(data)
    data[at + 124:at + 136] = field
    data[at + 148:at + 156] = b" " * 8
    data[at + 148:at + 156] = b"%06o\0 " % sum(data[at:at + 512])
    return data


def pax_size_header(value: bytes) -> bytes:
    """A PAX extended header whose only record is ``size=value``."""
    record = b" size=" + value + b"\n"
    length = len(record) + len(str(len(record) + 2))
    payload = str(length).encode() + record
    info = tarfile.TarInfo("././@PaxHeader")
    info.type, info.size = tarfile.XHDTYPE, len(payload)
    return info.tobuf(tarfile.USTAR_FORMAT) + payload + bytes(-len(payload) % 512)


# The member whose size is damaged: b.txt, the third member (two complete files before it).
CASES = {
    "octal 8 GiB": b"77777777777\0",
    "base-256 2**88": b"\x80" + b"\xff" * 11,
    "base-256 2**63 - 1": b"\x80\0\0\0\x7f" + b"\xff" * 7,
    "base-256 32 MiB": b"\x80" + bytes(7) + b"\x02" + bytes(3),
}

# Each read runs in a child whose memory is capped far below the sizes claimed: a reader that
# allocates by the size field fails there with MemoryError.
_CHILD = r"""
import json, resource, sys
import feedline as fl
resource.setrlimit(resource.RLIMIT_DATA, (768 << 20, 768 << 20))
results = []
for path, fields in json.loads(sys.argv[1]):
    samples = []
    try:
        for sample in fl.WebDataset(path, fields=fields):
            samples.append(sample["__key__"].decode())
        results.append({"samples": samples})
    except Exception as error:
        results.append({"samples": samples, "type": type(error).__name__,
                        "message": str(error), "path": getattr(error, "path", None),
                        "offset": getattr(error, "offset", None)})
print(json.dumps(results))
"""


def read_in_child(runs):
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(runs)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.timeout(180)
def test_size_fields_larger_than_the_file_are_truncation(tmp_path):
    base = archive()
    at = header_offsets(base)["b.txt"]
    runs = []
    for i, field in enumerate(CASES.values()):
        damaged = bytes(with_size(base, at, field))
        plain, packed = tmp_path / f"case{i}.tar", tmp_path / f"case{i}.tar.gz"
        plain.write_bytes(damaged)
        packed.write_bytes(gzip.compress(damaged))
        # Read (every field), and skipped (fields= leaves b.txt out): both paths.
        runs += [(str(path), fields) for path in (plain, packed) for fields in (None, ["cls"])]
    for (path, fields), got in zip(runs, read_in_child(runs), strict=True):
        where = f"{path} fields={fields}"
        assert got.get("type") == "DataLossError", (where, got)
        assert (got["path"], got["offset"]) == (path, at), (where, got)
        # The complete sample before comes first where b.txt is read: its header ends
        # sample a. Skipped (fields=), b.txt need not end it (a later a.* file would join it).
        assert got["samples"] == (["a"] if fields is None else []), (where, got)
        assert f"truncated archive {path}: member 'b.txt' at offset {at} needs" in \
            got["message"], (where, got)


def test_negative_base256_size_is_a_damaged_header(tmp_path):
    base = archive(tarfile.GNU_FORMAT)
    at = header_offsets(base)["b.txt"]
    path = tmp_path / "negative.tar"
    path.write_bytes(bytes(with_size(base, at, b"\xff" * 12)))
    with pytest.raises(fl.DataLossError, match=f"a damaged tar header at offset {at} of "
                                               ".*negative.tar .*size field is negative"
                       ) as raised:
        list(fl.WebDataset(str(path)))
    assert (raised.value.path, raised.value.offset) == (str(path), at)


@pytest.mark.parametrize(("value", "problem"), [
    (b"-3", "its size '-3' is not a byte count"),
    (b"1e9", "its size '1e9' is not a byte count"),
    (b"9" * 5000, r"its size \(5000 digits\) is larger than any archive"),
])
def test_damaged_pax_size_is_named(tmp_path, value, problem):
    path = tmp_path / "pax.tar"
    path.write_bytes(pax_size_header(value) + bytes(archive()))
    with pytest.raises(fl.DataLossError, match=f"damaged PAX header at offset 0 of "
                                               f".*pax.tar: {problem}") as raised:
        list(fl.WebDataset(str(path)))
    assert (raised.value.path, raised.value.offset) == (str(path), 0)


@pytest.mark.timeout(180)
def test_pax_size_larger_than_the_file_is_truncation(tmp_path):
    path = tmp_path / "pax-big.tar"
    path.write_bytes(pax_size_header(b"9" * 25) + bytes(archive()))
    got = read_in_child([(str(path), None)])[0]
    assert got.get("type") == "DataLossError", got
    assert "member 'a.txt' at offset 0 needs 9999999999999999999999999 bytes" in \
        got["message"], got


# Found by fuzzing (tests/fuzz/targets_webdataset.py), each against what tarfile reads.
def tarfile_samples(path):
    """``(key, field, data)`` of the regular members tarfile reads, as webdataset keys them."""
    from feedline.formats.webdataset import split_key

    with tarfile.open(path) as tar:
        return [(*split_key(m.name), tar.extractfile(m).read()) for m in tar if m.isreg()]


def feedline_samples(path):
    return [(s["__key__"].decode(), field, value) for s in fl.WebDataset(str(path))
            for field, value in s.items() if field[:2] != "__"]


@pytest.mark.parametrize("kind", [tarfile.FIFOTYPE, tarfile.SYMTYPE, tarfile.DIRTYPE,
                                  tarfile.CHRTYPE])
def test_links_folders_and_devices_have_no_data_whatever_their_size(tmp_path, kind):
    # A FIFO (or link, folder, device) whose size field says 700: tarfile reads no data
    # after it, so the next header follows at once; the reader skipped 700 bytes there.
    members = [("a.txt", b"x"), ("odd", b""), ("b.txt", b"y"), ("b.cls", b"2")]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            if name == "odd":
                info.type, info.linkname = kind, "a.txt"
            tar.addfile(info, io.BytesIO(data) if data else None)
    data = bytearray(buffer.getvalue())
    at = header_offsets(data)["odd"]
    path = tmp_path / "odd.tar"
    path.write_bytes(bytes(with_size(data, at, b"%011o\0" % 700)))
    assert feedline_samples(path) == [("a", "txt", b"x"), ("b", "txt", b"y"),
                                      ("b", "cls", b"2")] == \
        [(k, f, v) for k, f, v in tarfile_samples(path)]


def test_gzip_stream_is_checked_to_its_end(tmp_path):
    # Stored (level 0) deflate blocks: a flipped byte in a member's data decompresses without
    # an error; only gzip's CRC at the end of the stream, after the tar's end-of-archive
    # block, tells. The reader stopped at that block and gave the changed data.
    plain = bytes(archive())
    packed = bytearray(gzip.compress(plain, compresslevel=0, mtime=0))
    at = packed.index(b"y" * 700) + 100
    packed[at] ^= 0x01
    path = tmp_path / "flipped.tar.gz"
    path.write_bytes(bytes(packed))
    with pytest.raises(fl.DataLossError, match="flipped.tar.gz") as raised:
        list(fl.WebDataset(str(path)))
    assert raised.value.path == str(path)


def test_the_first_of_consecutive_extended_headers_names_the_member(tmp_path):
    # Two PAX headers before one member (one repeated by damage): tarfile gives the first
    # one's path (each applies to what the next gives), with a folder's slash dropped.
    def pax(path):
        record = b" path=" + path + b"\n"
        payload = str(len(record) + len(str(len(record) + 2))).encode() + record
        info = tarfile.TarInfo("././@PaxHeader")
        info.type, info.size = tarfile.XHDTYPE, len(payload)
        return info.tobuf(tarfile.USTAR_FORMAT) + payload + bytes(-len(payload) % 512)

    base = bytes(archive())
    path = tmp_path / "two-pax.tar"
    path.write_bytes(pax(b"first.txt/") + pax(b"second.txt") + base)
    assert feedline_samples(path)[0] == ("first", "txt", b"x" * 10) == tarfile_samples(path)[0]


def test_extended_header_before_the_end_of_the_archive_is_damage(tmp_path):
    # A GNU long-name header with no member after it: tarfile raises; the reader ended the
    # archive there without a word.
    info = tarfile.TarInfo("././@LongLink")
    info.type, info.size = tarfile.GNUTYPE_LONGNAME, 6
    path = tmp_path / "dangling.tar"
    path.write_bytes(_members_then(bytes(archive()), info.tobuf(tarfile.USTAR_FORMAT)
                                   + b"n.txt\0" + bytes(506)))
    with pytest.raises(tarfile.ReadError):
        tarfile_samples(path)
    with pytest.raises(fl.DataLossError, match="the extended header at offset \\d+ is followed "
                                               "by the end of the archive") as raised:
        list(fl.WebDataset(str(path)))
    assert raised.value.path == str(path)


def _members_then(data, extra):
    """``data`` (an archive) with ``extra`` inserted before its end-of-archive blocks."""
    end = data.rindex(b"c.txt")  # the last member's header; its data is one block
    return data[:end + 1024] + extra + data[end + 1024:]


def _pax_header(kind, records):
    payload = b""
    for key, value in records:
        record = b" %s=%s\n" % (key, value)
        payload += str(len(record) + len(str(len(record) + 2))).encode() + record
    info = tarfile.TarInfo("././@PaxHeader")
    info.type, info.size = kind, len(payload)
    return info.tobuf(tarfile.USTAR_FORMAT) + payload + bytes(-len(payload) % 512)


@pytest.mark.parametrize(("kind", "records", "says"), [
    (tarfile.XGLTYPE, [(b"path", b"every.txt")], "a global path for every member after it"),
    (tarfile.XGLTYPE, [(b"size", b"1")], "a global size for every member after it"),
    (tarfile.XHDTYPE, [(b"GNU.sparse.size", b"5")], "GNU sparse records"),
])
def test_pax_records_that_rename_or_resize_members_are_refused(tmp_path, kind, records, says):
    # tarfile gives every member after a global header its path (so every sample the same
    # key, webdataset's duplicate-field error or one merged sample); the reader ignored it.
    path = tmp_path / "global.tar"
    path.write_bytes(_pax_header(kind, records) + bytes(archive()))
    with pytest.raises(fl.InvalidArgumentError, match=f"PAX header at offset 0 of .*global.tar "
                                                      f"sets {says}") as raised:
        list(fl.WebDataset(str(path)))
    assert (raised.value.path, raised.value.offset) == (str(path), 0)
    comment = tmp_path / "comment.tar"  # as git archive writes one: read as ever
    comment.write_bytes(_pax_header(tarfile.XGLTYPE, [(b"comment", b"abc")]) + bytes(archive()))
    assert feedline_samples(comment) == tarfile_samples(comment)


def test_gnu_long_name_ends_at_its_nul_as_tarfile_reads_it(tmp_path):
    # The name's NUL lies past the declared size (damage, or an odd writer): tarfile reads
    # the whole block up to the NUL; the reader cut the name at the declared size.
    data = bytearray(archive(tarfile.GNU_FORMAT))
    info = tarfile.TarInfo("././@LongLink")
    info.type, info.size = tarfile.GNUTYPE_LONGNAME, 3
    long_name = info.tobuf(tarfile.USTAR_FORMAT) + b"longer.txt\0".ljust(512, b"\0")
    path = tmp_path / "long.tar"
    path.write_bytes(long_name + bytes(data))
    assert feedline_samples(path)[0] == ("longer", "txt", b"x" * 10) == tarfile_samples(path)[0]
