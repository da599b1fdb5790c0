"""WebDataset: shards written by webdataset's TarWriter and by tarfile, read as webdataset
reads them; checkpoints, sharding, remote files, damaged archives."""

import io
import json
import tarfile
from pathlib import Path

import fsspec
import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.distribute.autoshard import plan_sharding
from feedline.formats.webdataset import split_key
from feedline.testing import assert_elements_equal, check_checkpointing

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "webdataset"
EXPECTED = json.loads((GOLDEN / "expected.json").read_text())
SHARDS = [str(GOLDEN / name) for name in ("shard-00000.tar", "shard-00001.tar",
                                          "shard-00002.tar.gz")]


def expected(name, url=None):
    """The samples webdataset's loader gave for shard ``name``, as feedline gives them."""
    url = (url or str(GOLDEN / name)).encode()
    return [{k: (v.encode() if k == "__key__" else url if k == "__url__"
                 else bytes.fromhex(v)) for k, v in sample.items()} for sample in EXPECTED[name]]


def pixels(i):
    return np.array(EXPECTED["images"][str(i)], np.uint8)


def tar_bytes(members, fmt=tarfile.USTAR_FORMAT):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def write(path, members):
    Path(path).write_bytes(tar_bytes(members))
    return str(path)


def test_shards_written_by_webdataset_read_as_webdataset_reads_them():
    for name in ("shard-00000.tar", "shard-00001.tar", "shard-00002.tar.gz"):
        got = list(fl.WebDataset(str(GOLDEN / name)))
        assert_elements_equal(got, expected(name), name)
        assert [list(s) for s in got] == [list(s) for s in EXPECTED[name]]  # field order
    assert_elements_equal(list(fl.WebDataset(SHARDS)),
                          [s for name in SHARDS for s in expected(Path(name).name)])


def test_tarfile_archives_long_names_pax_and_skipped_members():
    # GNU long names, a folder, a symlink, __x__ files, no-extension and upper-case names.
    assert_elements_equal(list(fl.WebDataset(str(GOLDEN / "edge.tar"))), expected("edge.tar"))
    pax = list(fl.WebDataset(str(GOLDEN / "pax.tar")))
    assert_elements_equal(pax, expected("pax.tar"))
    assert pax[0]["__key__"].decode() == "ünïcode/ключ"


def test_key_split_follows_webdataset():
    assert split_key("a.b/c.d.e") == ("a.b/c", "d.e")
    assert split_key(".hidden") is None and split_key("dir/") is None


def test_fields_select_and_order_and_missing_fields_are_named(tmp_path):
    ds = fl.WebDataset(SHARDS[:2], fields=["txt", "CLS"])
    got = list(ds)
    assert [list(s) for s in got] == [["__key__", "__url__", "txt", "cls"]] * 8
    assert [s["cls"] for s in got] == [b"%d" % (i % 3) for i in range(8)]
    batch = next(iter(ds.batch(3)))
    assert batch["txt"].tolist() == [b"caption 0", b"caption 1", b"caption 2"]
    path = write(tmp_path / "gap.tar", [("a.txt", b"1"), ("a.cls", b"0"), ("b.txt", b"2"),
                                        ("c.txt", b"3"), ("c.cls", b"1")])
    it = fl.WebDataset(path, fields=["txt", "cls"])._make_iterator(IteratorContext())
    assert next(it)["txt"] == b"1"
    with pytest.raises(fl.InvalidArgumentError,
                       match=r"sample 'b' \(sample 1 of .*gap.tar\) has no \['cls'\]"):
        next(it)
    assert [s["txt"] for s in it] == [b"3"]  # the sample after it follows
    it.close()


def test_decode_images_and_integers():
    # webdataset's names: "rgb8" is uint8, "rgb" float32 in [0, 1] (issue 43), "l8" has no
    # channel axis. Every spec against webdataset's own output: test_webdataset_decode.py.
    first = next(iter(fl.WebDataset(SHARDS[0], decode="rgb8")))
    np.testing.assert_array_equal(first["png"], pixels(0))
    assert first["cls"] == np.int64(0) and first["txt"] == b"caption 0"
    scaled = next(iter(fl.WebDataset(SHARDS[0], decode="rgb")))["png"]
    assert scaled.dtype == np.float32
    np.testing.assert_array_equal(scaled, pixels(0).astype(np.float32) / 255)
    gray = next(iter(fl.WebDataset(SHARDS[1], decode="l8")))
    assert gray["png"].shape == pixels(5).shape[:2] and gray["png"].dtype == np.uint8
    own = next(iter(fl.WebDataset(SHARDS[2], decode="image")))
    np.testing.assert_array_equal(own["png"], pixels(8))
    with pytest.raises(ValueError, match="decode must be"):
        fl.WebDataset(SHARDS, decode="jpg")


def test_undecodable_field_is_named_and_the_next_sample_follows(tmp_path):
    path = write(tmp_path / "bad.tar", [("a.png", b"not a png"), ("b.cls", b"4")])
    it = fl.WebDataset(path, decode="rgb")._make_iterator(IteratorContext())
    with pytest.raises(fl.InvalidArgumentError, match="cannot decode field 'png' of sample 'a'"
                                                      r" \(sample 0 of .*bad.tar\)") as raised:
        next(it)
    assert (raised.value.path, raised.value.record_index) == (path, 0)
    assert next(it)["cls"] == 4
    it.close()


def test_duplicate_fields_are_an_error(tmp_path):
    path = write(tmp_path / "dup.tar", [("a.txt", b"1"), ("a.txt", b"2")])
    with pytest.raises(fl.InvalidArgumentError, match="sample 'a' has two 'txt' files"):
        list(fl.WebDataset(path))


@pytest.mark.parametrize("parallel", [None, 2])
def test_checkpointing(tmp_path, parallel):
    other = write(tmp_path / "c.tar", [("z/p.txt", b"p"), ("__meta__", b"-"), ("z/q.txt", b"q")])
    empty = write(tmp_path / "empty.tar", [])
    check_checkpointing(fl.WebDataset([SHARDS[1], empty, SHARDS[2], other],
                                      num_parallel_reads=parallel))


def test_state_is_shard_offset_and_sample():
    with iter(fl.WebDataset(SHARDS)) as it:
        for _ in range(6):
            next(it)
        state = it.state_dict()["root"]
    # Shard 1's second sample: 4 files of 512-byte header + one block of data each, after
    # the first sample's 4 files (the png's data takes one block too).
    assert (state["file_index"], state["position"]) == (1, {"offset": 4096, "sample": 1})


def test_remote_shards_through_fsspec():
    url = "memory://webdataset-test/shard-00000.tar"
    fsspec.filesystem("memory").pipe(url.removeprefix("memory://"),
                                     Path(SHARDS[0]).read_bytes())
    ds = fl.WebDataset(url)
    assert_elements_equal(list(ds), expected("shard-00000.tar", url))
    check_checkpointing(ds, steps=[0, 2, 5], epochs=1)


def test_sharded_by_file_and_read_in_worker_processes():
    ds = fl.WebDataset(SHARDS[:2], fields=["txt"]).map(lambda s: s["txt"])
    plan = plan_sharding(ds, 2)
    assert (plan.policy, plan.files) == ("file", 2)
    shares = [[s["txt"] for s in fl.WebDataset(SHARDS[:2]).distribute(fl.InputContext(2, k))]
              for k in range(2)]
    assert shares == [[b"caption %d" % i for i in range(5)], [b"caption %d" % i
                                                                for i in range(5, 8)]]


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_worker_processes():
    ds = fl.WebDataset(SHARDS[:2], fields=["txt"]).map(lambda s: s["txt"])
    got = list(ds.multiprocess(2))
    # Shards go to the workers in turn; their samples are merged one by one.
    assert got == [b"caption 0", b"caption 5", b"caption 1", b"caption 6", b"caption 2",
                   b"caption 7", b"caption 3", b"caption 4"]


def test_list_files_then_webdataset():
    names = fl.Dataset.list_files(str(GOLDEN / "shard-0000[01].tar"), shuffle=False)
    assert [s["__key__"] for s in fl.WebDataset(names)] == [b"sample%04d" % i for i in range(8)]


# ------------------------------------------------------------------------ bad input
def offsets(path):
    with tarfile.open(path) as tar:
        return [(m.name, m.offset) for m in tar.getmembers()]


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.tar"):
        list(fl.WebDataset(str(tmp_path / "missing.tar")))


def test_damaged_header_names_file_member_and_offset(tmp_path):
    data = bytearray(Path(SHARDS[0]).read_bytes())
    name, at = offsets(SHARDS[0])[9]  # sample 2's second file
    data[at + 10] ^= 0x55
    path = tmp_path / "damaged.tar"
    path.write_bytes(bytes(data))
    it = fl.WebDataset([str(path), SHARDS[1]])._make_iterator(IteratorContext())
    assert [s["__key__"] for s in (next(it), next(it))] == [b"sample0000", b"sample0001"]
    previous = offsets(SHARDS[0])[8][0]
    with pytest.raises(fl.DataLossError, match=f"a damaged tar header at offset {at} of "
                                               f".*damaged.tar \\(after member "
                                               f"'{previous}'\\): bad checksum") as raised:
        next(it)
    assert (raised.value.path, raised.value.offset) == (str(path), at)
    assert [s["__key__"] for s in it] == [b"sample%04d" % i for i in range(5, 8)]
    it.close()
    assert len(list(fl.WebDataset([str(path), SHARDS[1]]).ignore_errors())) == 5


def test_truncated_archives(tmp_path):
    whole = Path(SHARDS[1]).read_bytes()
    name, at = offsets(SHARDS[1])[5]
    cut = tmp_path / "cut.tar"
    cut.write_bytes(whole[:at + 512 + 3])  # inside member 5's data
    with pytest.raises(fl.DataLossError, match=f"truncated archive .*cut.tar: member '{name}' "
                                               f"at offset {at} needs"):
        list(fl.WebDataset(str(cut)))
    it = iter(fl.WebDataset(str(cut)))
    assert next(it)["__key__"] == b"sample0005"  # the complete sample comes first
    it.close()
    no_end = tmp_path / "no_end.tar"
    end = offsets(SHARDS[1])[-1][1] + 1024  # the last member's header and data
    no_end.write_bytes(whole[:end])
    with pytest.raises(fl.DataLossError, match=f"ends at offset {end} without the "
                                               "end-of-archive block"):
        list(fl.WebDataset(str(no_end)))


def test_other_files_are_not_archives(tmp_path):
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"this is not a tar file" * 40)
    with pytest.raises(fl.DataLossError, match="not a tar archive at offset 0 of .*junk.tar"):
        list(fl.WebDataset(str(junk)))
    empty = tmp_path / "empty.tar"
    empty.write_bytes(b"")
    with pytest.raises(fl.DataLossError, match="empty.tar is empty, not a tar archive"):
        list(fl.WebDataset(str(empty)))
    gz = tmp_path / "plain.tar.gz"  # named .gz, not compressed
    gz.write_bytes(Path(SHARDS[0]).read_bytes())
    with pytest.raises(fl.DataLossError, match="plain.tar.gz"):
        list(fl.WebDataset(str(gz)))
    assert len(list(fl.WebDataset(str(gz), compression_type=""))) == 5


def test_bad_arguments():
    with pytest.raises(TypeError, match="list of field names"):
        fl.WebDataset(SHARDS, fields="txt")
    with pytest.raises(ValueError, match="compression_type"):
        fl.WebDataset(SHARDS, compression_type="bz2")


def _read_header(parse, block):
    """What a header parser makes of ``block``: its fields, the end block, or its error."""
    try:
        result = parse(block)
    except tarfile.HeaderError as error:
        return ("error", type(error).__name__, str(error))
    return ("end",) if result is None else ("member", *result)


def _frombuf(block):
    try:
        info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
    except tarfile.EOFHeaderError:
        return None
    return info.name, info.type, info.size


def _header_blocks():
    """Every header of the golden shards and of archives in each tarfile format with long
    names, ustar prefixes, directories, links, big sizes and ids, odd bytes in names."""
    import gzip

    blocks = []
    for path in GOLDEN.glob("*.tar*"):
        data = path.read_bytes()
        data = gzip.decompress(data) if path.name.endswith(".gz") else data
        blocks += [data[i:i + 512] for i in range(0, len(data), 512)]
    infos = []
    for name, kind, size in [("a.txt", tarfile.REGTYPE, 3), ("dir/", tarfile.DIRTYPE, 0),
                             ("v7dir/", tarfile.AREGTYPE, 0), ("x" * 99 + ".b", tarfile.REGTYPE, 1),
                             ("p/" * 60 + "deep.txt", tarfile.REGTYPE, 7),
                             ("link", tarfile.SYMTYPE, 0), ("caf\xe9.txt", tarfile.REGTYPE, 2),
                             ("big.bin", tarfile.REGTYPE, 8 ** 11 + 5),
                             ("bad\udcff.txt", tarfile.REGTYPE, 1)]:
        info = tarfile.TarInfo(name)
        info.type, info.size = kind, size
        info.linkname = "target" if kind == tarfile.SYMTYPE else ""
        infos.append(info)
    uid = tarfile.TarInfo("ids.txt")
    uid.uid, uid.gid, uid.mtime = 8 ** 8, 5, -1  # base-256 fields in the GNU format
    infos.append(uid)
    for fmt in (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        for info in infos:
            try:
                data = info.tobuf(fmt, "utf-8", "surrogateescape")
            except ValueError:  # a field this format cannot hold
                continue
            blocks += [data[i:i + 512] for i in range(0, len(data), 512)]
    return blocks


def test_header_parser_reads_as_tarfile_does():
    from feedline.formats.webdataset import parse_header

    blocks = _header_blocks()
    assert len(blocks) > 100
    rng = np.random.default_rng(0)
    checked = 0
    for block in blocks:
        variants = [block, block[:300], block[:-1] + b"x"]
        if block.count(0) != 512:
            # Numbers written with spaces (old tars), a signed checksum, damage anywhere.
            spaced = bytearray(block)
            spaced[100:108] = b" 644   \0"
            total = 256 + sum(spaced) - sum(spaced[148:156])
            spaced[148:156] = b"%06o\0 " % total
            variants.append(bytes(spaced))
            signed = bytearray(block)
            signed[90] = 0xE9
            total = 256 + sum(np.frombuffer(bytes(signed), np.int8).astype(int)) \
                - sum(np.frombuffer(bytes(signed[148:156]), np.int8).astype(int))
            signed[148:156] = b"%06o\0 " % total
            variants.append(bytes(signed))
            for _ in range(20):
                damaged = bytearray(block)
                at = int(rng.integers(0, 512))
                damaged[at] = int(rng.choice([0, 0x20, 0x30, 0x37, 0x38, 0x5F, 0x80, 0xFF,
                                              int(rng.integers(0, 256))]))
                variants.append(bytes(damaged))
        for variant in variants:
            assert _read_header(parse_header, variant) == _read_header(_frombuf, variant), \
                variant
            checked += 1
    assert checked > 2000
    assert _read_header(parse_header, bytes(512)) == ("end",)


def test_gnu_long_names_and_pax_headers_in_each_format(tmp_path):
    # 152 characters: a GNU long name, a PAX path, a ustar prefix + name.
    long_name = "f" * 60 + "/" + "n" * 80 + ".sample.txt"
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT):
        path = tmp_path / f"long-{fmt}.tar"
        path.write_bytes(tar_bytes([(long_name, b"x"), ("folder/b.txt", b"y")], fmt))
        got = list(fl.WebDataset(str(path)))
        assert [(s["__key__"], list(s)[2:]) for s in got] == [
            (long_name[:-len(".sample.txt")].encode(), ["sample.txt"]),
            (b"folder/b", ["txt"])], fmt
