"""Fuzz targets: WebDataset ``.tar`` shards, plain and gzip-compressed, read without and with
image decoding.

Each mutant is read whole and checked against an oracle: Python's :mod:`tarfile` reads the
same bytes and its regular members are grouped into samples as WebDataset groups them. A
shard that feedline reads without an error must give exactly the oracle's samples (nothing
dropped, shortened or invented); a damaged one must raise a feedline error naming the file
and the offset or sample, after samples that agree with the oracle's. On top of the
harness's byte mutations, ``read`` applies structure-aware damage seeded by the input's bytes
(so a saved input replays exactly): a header's size field (octal and base-256, huge,
negative, off by a few bytes or blocks), its name (no extension, ``__x__``, a folder, bytes
that are not UTF-8, a duplicate), its type flag, magic or ustar prefix; a member dropped,
repeated or cut; the end-of-archive blocks removed; then the header checksums recomputed,
so the damage passes the header check and reaches the reader's logic.

* ``webdataset``: plain shards, no decoding.
* ``webdataset_gzip``: ``.tar.gz`` shards: damaged compressed bytes as the harness mutates
  them, or (when they still decompress) the tar inside damaged as above and compressed again.
* ``webdataset_decode``: plain shards with images (JPEG, PNG, GIF, BMP, WebP), read with a
  ``decode`` spec chosen from the input (decoding goes through :mod:`feedline.image`).

Memory caps (peak RSS of the child; the interpreter with NumPy and feedline takes about
65 MiB by itself, about 85 MiB with Pillow and the image codecs): 256 MiB for the readers (a
size field is checked against the file before anything is allocated by it; a member of a
compressed shard is read in 1 MiB chunks, so memory follows the bytes the stream really
holds: the shards here are under 100 KiB); 512 MiB with decoding, where a damaged image
header may declare large dimensions (what bounds those is :mod:`feedline.image`'s pixel
limit). The harness caps the child's data segment 256 MiB above these, so an allocation by
a crafted size fails there as a ``MemoryError``.
"""

from __future__ import annotations

import gzip
import io
import random
import tarfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from fuzz_harness import FuzzTarget

import feedline as fl
from feedline.core.errors import FeedlineError
from feedline.formats.webdataset import _skipped, split_key

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "webdataset"
_BLOCK = 512


class OracleMismatch(AssertionError):
    """The reader's samples differ from what tarfile reads (never an allowed error)."""


def _seeded(data: bytes) -> random.Random:
    return random.Random(zlib.crc32(data))


# ------------------------------------------------------------------------------ corpus
def _encoded_images() -> list[tuple[str, bytes]]:
    from PIL import Image

    rng = np.random.default_rng(41)
    out = []
    for i, (field, mode) in enumerate([("jpg", "RGB"), ("png", "RGBA"), ("png", "L"),
                                       ("gif", "P"), ("bmp", "RGB"), ("webp", "RGB"),
                                       ("jpeg", "L"), ("png", "LA")]):
        size = (3 + i % 4, 2 + i % 3)
        pixels = rng.integers(0, 256, (size[1], size[0], len(mode) if mode != "P" else 3),
                              dtype=np.uint8)
        picture = Image.fromarray(pixels if mode != "L" else pixels[:, :, 0],
                                  "RGB" if mode == "P" else mode)
        if mode == "P":
            picture = picture.quantize(6)
        buffer = io.BytesIO()
        picture.save(buffer, format={"jpg": "JPEG", "jpeg": "JPEG"}.get(field, field.upper()))
        out.append((field, buffer.getvalue()))
    return out


def _tar(members: list[tuple[str, bytes]], fmt: int, **extra: Any) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 1_700_000_000, 0o644
            if name.endswith("/"):
                info.type, info.size = tarfile.DIRTYPE, 0
            for key, value in extra.get(name, {}).items():
                setattr(info, key, value)
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def _shards(images: bool) -> list[bytes]:
    """Valid shards: several samples of several fields each, in the ustar, GNU and PAX
    formats, with long names, folders, links, skipped members, an empty archive."""
    pictures = _encoded_images()
    samples = []
    for i in range(6):
        field, picture = pictures[i % len(pictures)]
        files = [(f"s{i:03d}.txt", b"caption %d" % i), (f"s{i:03d}.cls", b"%d" % (i % 4)),
                 (f"s{i:03d}.json", b'{"i": %d}' % i)]
        if images:
            files.insert(0, (f"s{i:03d}.{field}", picture))
            files.append((f"s{i:03d}.seg.{pictures[-1 - i % 3][0]}", pictures[-1 - i % 3][1]))
        samples += files
    shards = [_tar(samples, tarfile.USTAR_FORMAT),
              _tar(samples[::-1][:9][::-1], tarfile.GNU_FORMAT)]
    long_folder = "a-folder-name-long-enough-for-a-gnu-long-name-header/" * 2
    edge = [("__meta__", b"skipped"), ("data.v1/", b""), ("data.v1/one.txt", b"first"),
            ("data.v1/one.JSON", b"{}"), ("data.v1/README", b"no extension"),
            (long_folder + "two.txt", b"long"), (long_folder + "two.bin", bytes(range(256)) * 3),
            ("__skip__/three.txt", b"skipped"), ("three.txt", b""), ("three.cls", b"7")]
    if images:
        edge.insert(3, ("data.v1/one.png", pictures[1][1]))
    link = {"data.v1/one.lnk": {"type": tarfile.SYMTYPE, "linkname": "one.txt"}}
    shards.append(_tar(edge[:5] + [("data.v1/one.lnk", b"")] + edge[5:], tarfile.GNU_FORMAT,
                       **link))
    pax = [("ünïcode/ключ.txt", "значение".encode()), ("ünïcode/ключ.cls", b"1"),
           ("x" * 120 + ".txt", b"long pax name"), ("y.txt", b"pax size")]
    if images:
        pax.insert(2, ("ünïcode/ключ.gif", pictures[3][1]))
    shards.append(_tar(pax, tarfile.PAX_FORMAT,
                       **{"y.txt": {"pax_headers": {"size": "8", "comment": "c"}}}))
    shards.append(_tar([], tarfile.USTAR_FORMAT))
    if not images:
        shards += [(GOLDEN / name).read_bytes() for name in ("shard-00001.tar", "edge.tar")]
    return shards


def _plain_corpus(folder: Path) -> list[bytes]:
    return _shards(images=False)


def _image_corpus(folder: Path) -> list[bytes]:
    return _shards(images=True)


def _gzip_corpus(folder: Path) -> list[bytes]:
    return [gzip.compress(shard, mtime=0) for shard in _shards(images=False)] + [
        (GOLDEN / "shard-00002.tar.gz").read_bytes()]


# ------------------------------------------------------------------- structured damage
def _headers(data: bytes) -> list[int]:
    """Offsets of the headers a reader walks to, as far as they parse."""
    offsets, at = [], 0
    while at + _BLOCK <= len(data):
        block = data[at:at + _BLOCK]
        if block.count(0) == _BLOCK:
            break
        try:
            info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
        except tarfile.HeaderError:
            break
        offsets.append(at)
        at += _BLOCK + (max(info.size, 0) + _BLOCK - 1) // _BLOCK * _BLOCK
    return offsets


def _checksum(data: bytearray, at: int) -> None:
    if at + _BLOCK <= len(data):
        data[at + 148:at + 156] = b" " * 8
        data[at + 148:at + 156] = b"%06o\0 " % sum(data[at:at + _BLOCK])


def _fix_checksums(data: bytearray) -> None:
    """Every header's checksum made valid, walking the archive as a reader would."""
    at = 0
    while at + _BLOCK <= len(data) and data[at:at + _BLOCK].count(0) != _BLOCK:
        _checksum(data, at)
        try:
            info = tarfile.TarInfo.frombuf(bytes(data[at:at + _BLOCK]), "utf-8",
                                           "surrogateescape")
        except tarfile.HeaderError:
            return
        at += _BLOCK + (max(info.size, 0) + _BLOCK - 1) // _BLOCK * _BLOCK


def _size_field(value: int) -> bytes:
    if 0 <= value < 8 ** 11:
        return b"%011o\0" % value
    if value < 0:  # base-256, two's complement, as GNU tar writes negative numbers
        return bytes([0xFF]) + (256 ** 11 + value).to_bytes(11, "big")
    return bytes([0x80]) + (value % 256 ** 11).to_bytes(11, "big")


_TYPES = b"0\x001234567LKxgSXDVM"


def _damage_header(data: bytearray, at: int, rng: random.Random, names: list[bytes]) -> None:
    try:
        size = tarfile.TarInfo.frombuf(bytes(data[at:at + _BLOCK]), "utf-8",
                                       "surrogateescape").size
    except tarfile.HeaderError:
        size = 0
    kind = rng.randrange(7)
    if kind == 0:  # the size field
        rest = len(data) - at - _BLOCK
        value = rng.choice([0, 1, size - 1, size + 1, size - _BLOCK, size + _BLOCK, size * 2,
                            511, 512, 513, rest, rest + 1, rest - 511, 8 ** 11 - 1, 1 << 33,
                            (1 << 63) - 1, 1 << 63, 1 << 87, -1, -(1 << 40)])
        data[at + 124:at + 136] = _size_field(value)
    elif kind == 1:  # the name
        name = bytes(data[at:at + 100]).split(b"\0", 1)[0]
        new = rng.choice([name.replace(b".", b""), b"__" + name + b"__", b"dir/" + name,
                          name + b"/", b"", b"\xff\xfe" + name, name.upper(),
                          rng.choice(names) if names else name, b"." + name,
                          name.split(b".")[0] + b".a.b.c", b"x" * 99 + b".t"])
        data[at:at + 100] = new[:100].ljust(100, b"\0")
    elif kind == 2:  # the type flag
        data[at + 156] = rng.choice(_TYPES) if rng.random() < 0.9 else rng.randrange(256)
    elif kind == 3:  # magic and version
        data[at + 257:at + 265] = rng.choice([b"ustar\x0000", b"ustar  \0", b"\0" * 8,
                                              b"garbage!"])
    elif kind == 4:  # a ustar prefix
        data[at + 345:at + 500] = rng.choice([b"pre/fix", b"\xff" * 10, b"a" * 155,
                                              b"__x__"]).ljust(155, b"\0")
    elif kind == 5:  # a number field that is not octal (frombuf's path)
        start = rng.choice([100, 108, 116, 136, 329])
        data[at + start:at + start + 8] = rng.choice([b" 644   \0", b"\x80\0\0\0\0\0\0\x01",
                                                      b"zzzzzzz\0", b"0000000 "])
    else:  # the link name, the long-link path of a link
        data[at + 157:at + 257] = b"target".ljust(100, b"\0")


def _damage_structure(data: bytes, rng: random.Random) -> bytes:
    """One to three structural changes, then the checksums of the changed headers (or of
    every header) recomputed."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        offsets = _headers(bytes(out))
        if not offsets:
            break
        names = [bytes(out[o:o + 100]).split(b"\0", 1)[0] for o in offsets]
        which = rng.randrange(len(offsets))
        at = offsets[which]
        end = offsets[which + 1] if which + 1 < len(offsets) else None
        kind = rng.randrange(10)
        if kind < 6:
            _damage_header(out, at, rng, names)
            _checksum(out, at)
        elif kind == 6 and end is not None:  # a member dropped
            del out[at:end]
        elif kind == 7 and end is not None:  # a member repeated
            out[end:end] = out[at:end]
        elif kind == 8:  # cut inside a member, or the end-of-archive blocks removed
            stop = end if end is not None else len(out)
            del out[rng.choice([rng.randint(at, stop), stop]):]
        else:
            _fix_checksums(out)
    return bytes(out)


# ---------------------------------------------------------------------------- oracle
def _oracle(data: bytes) -> tuple[list[dict[str, Any]], str | None]:
    """The samples :mod:`tarfile` reads from ``data``, grouped as WebDataset groups regular
    files; and why it stopped early (a tarfile error, a duplicate field, a sparse member),
    or ``None``."""
    samples: list[dict[str, Any]] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                if member.size < 0:  # tarfile would walk back and loop forever
                    return samples, "a negative size"
                if member.type == tarfile.GNUTYPE_SPARSE or any(
                        key.startswith("GNU.sparse.") for key in member.pax_headers):
                    return samples, "a sparse member"
                if "path" in tar.pax_headers or "size" in tar.pax_headers:
                    return samples, "a global PAX path or size (refused by the reader)"
                if not member.isreg():
                    continue
                split = split_key(member.name)
                if split is None or _skipped(member.name):
                    continue
                key, field = split[0].encode("utf-8", "surrogateescape"), split[1].lower()
                if member.offset_data + member.size > len(data):
                    return samples, "a member cut short"  # (read, tarfile would allocate it)
                reader = tar.extractfile(member)
                value = reader.read() if reader is not None else b""
                if len(value) != member.size:
                    return samples, "a member cut short"
                if samples and samples[-1]["__key__"] == key:
                    if field in samples[-1]:
                        return samples[:-1], "a duplicate field"
                    samples[-1][field] = value
                else:
                    samples.append({"__key__": key, field: value})
    except (tarfile.TarError, EOFError, OSError, ValueError, UnicodeError,
            OverflowError) as error:  # tarfile's own raw errors on damaged input
        return samples, f"tarfile: {type(error).__name__}: {error}"
    return samples, None


def _plain(sample: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sample.items() if k != "__url__"}


def _check(path: Path, data: bytes, decode: str | None = None,
           compression: str | None = None) -> None:
    """Read ``path`` (whose tar bytes are ``data``) whole and compare with the oracle."""
    expected, stopped = _oracle(data)
    got: list[dict[str, Any]] = []
    try:
        for sample in fl.WebDataset(str(path), decode=decode, compression_type=compression):
            got.append(sample)
    except FeedlineError:
        if decode is None:
            # Samples before the damage are the oracle's (tarfile may stop sooner, where
            # it reads a damaged header as the end of the archive).
            common = min(len(got), len(expected))
            if [_plain(s) for s in got[:common]] != expected[:common]:
                raise OracleMismatch("samples before the error differ from tarfile's")
        raise
    if decode is not None:
        if [s["__key__"] for s in got] != [s["__key__"] for s in expected]:
            raise OracleMismatch("decoded samples' keys differ from tarfile's")
        return
    if stopped is not None:
        raise OracleMismatch(f"read {len(got)} samples without an error where tarfile "
                             f"stops after {len(expected)} ({stopped})")
    if [_plain(s) for s in got] != expected:
        raise OracleMismatch(f"read {len(got)} samples without an error; tarfile reads "
                             f"{len(expected)}, or different contents")


def _read_plain(data: bytes, scratch: Path) -> None:
    rng = _seeded(data)
    if rng.random() < 0.7:
        data = _damage_structure(data, rng)
    path = scratch / "input.tar"
    path.write_bytes(data)
    _check(path, data)


def _decodable_prefix(data: bytes) -> bytes:
    """What a gzip stream decompresses to before its damage."""
    decoder = zlib.decompressobj(wbits=31)
    try:
        return decoder.decompress(data)
    except zlib.error:
        return b""


def _read_gzip(data: bytes, scratch: Path) -> None:
    path = scratch / "input.tar.gz"
    rng = _seeded(data)
    try:
        plain = gzip.decompress(data)
    except (OSError, EOFError, zlib.error):
        if rng.random() < 0.5:
            # Damaged compression: only how it fails is checked.
            path.write_bytes(data)
            for _ in fl.WebDataset(str(path)):
                pass
            raise OracleMismatch("damaged gzip data read without an error") from None
        # Else the tar bytes that decompressed before the damage, compressed again: most
        # byte mutations of a gzip stream would otherwise never reach the tar reader.
        plain = _decodable_prefix(data)
        if rng.random() < 0.5:  # cut at a block boundary and ended properly
            plain = plain[:len(plain) // _BLOCK * _BLOCK] + bytes(2 * _BLOCK)
    if rng.random() < 0.7:
        plain = _damage_structure(plain, rng)
    data = gzip.compress(plain, mtime=0)
    path.write_bytes(data)
    _check(path, plain, compression="GZIP")


_DECODE_SPECS = ("rgb8", "rgb", "l8", "rgba", "torchrgb", "torchl8", "image")


def _read_decoded(data: bytes, scratch: Path) -> None:
    rng = _seeded(data)
    if rng.random() < 0.5:
        data = _damage_structure(data, rng)
    path = scratch / "input.tar"
    path.write_bytes(data)
    _check(path, data, decode=rng.choice(_DECODE_SPECS))


def _names_file_and_place(error: BaseException, scratch: Path | None) -> str | None:
    if not (getattr(error, "path", None) or "input.tar" in str(error)):
        return "the error does not name the file"
    if getattr(error, "offset", None) is None and getattr(error, "record_index", None) is None:
        return "the error names no offset or sample"
    return None


TARGETS = {
    "webdataset": FuzzTarget(corpus=_plain_corpus, read=_read_plain, allowed=(FeedlineError,),
                             where=_names_file_and_place, memory_cap_mib=256),
    "webdataset_gzip": FuzzTarget(corpus=_gzip_corpus, read=_read_gzip,
                                  allowed=(FeedlineError,), where=_names_file_and_place,
                                  memory_cap_mib=256),
    "webdataset_decode": FuzzTarget(corpus=_image_corpus, read=_read_decoded,
                                    allowed=(FeedlineError,), where=_names_file_and_place,
                                    memory_cap_mib=512),
}
