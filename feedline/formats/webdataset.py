"""WebDataset ``.tar`` shards: the files of an archive grouped into samples by key.

The WebDataset convention: in a tar archive, consecutive files that share a *key* form one
sample; the key is the file's path up to the first dot of its base name, the rest is the
field (``images/cat01.seg.png`` is field ``seg.png`` of sample ``images/cat01``). Field
names are lower-cased. As the ``webdataset`` package does, only regular files count, and
files without an extension, top-level ``__x__`` files and files under a ``__x__/`` folder
are skipped; two files of one sample with the same field are an error.

Archives are parsed here, header by header, rather than through :mod:`tarfile`'s streaming
mode, which ends silently at a damaged header: a header whose checksum does not match, a
member cut short, or an archive without its end-of-archive block is a
:class:`~feedline.core.errors.DataLossError` naming the file, the member and its offset,
raised after every complete sample before the damage. The position of a reader is the
byte offset of the next sample's first header, so a checkpoint seeks straight back to it
(a gzip-compressed shard decompresses and drops what comes before). A size field is checked
against what the file holds before anything is read by it, and a gzip-compressed shard is
read to its end (past the end-of-archive block), where gzip checks its CRC.

``decode`` takes webdataset's image spec names with webdataset's meaning. A change for
earlier users: ``"rgb"`` and ``"l"`` now give ``float32`` in ``[0, 1]``, no longer ``uint8``
(``"rgb8"`` and ``"l8"`` do), and ``"l"``/``"l8"`` images have no channel axis.
"""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Sequence
from typing import IO, Any, ClassVar, NamedTuple

import numpy as np

from feedline.core.errors import DataLossError, InvalidArgumentError
from feedline.core.structure import TensorSpec
from feedline.formats._file_reader import FileReaderDataset, RecordCursor
from feedline.formats.files import compression_name, open_file

__all__ = ["WebDataset"]

_BLOCK = 512
# webdataset's tariterators: the key and the field of a file name, and the files it skips.
_KEY_AND_FIELD = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_META = re.compile(r"__[^/]*__($|/)")
# Bytes skipped in one read when a stream cannot seek.
_SKIP_CHUNK = 1 << 20
_IMAGE_FIELDS = frozenset({"jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm", "bmp", "gif",
                           "webp"})
_INT_FIELDS = frozenset({"cls", "cls2", "class", "count", "index", "inx", "id"})


class _ImageSpec(NamedTuple):
    """How a ``decode`` name gives an image: channels first (torch's layout) or last, float
    in ``[0, 1]`` or ``uint8``, and the Pillow mode converted to (``None``: the image's own)."""

    channels_first: bool
    scaled: bool
    mode: str | None


# webdataset's imagespecs (autodecode.py), name for name; "image" is feedline's own.
_IMAGE_SPECS: dict[str, _ImageSpec] = {
    "l8": _ImageSpec(False, False, "L"), "rgb8": _ImageSpec(False, False, "RGB"),
    "rgba8": _ImageSpec(False, False, "RGBA"), "l": _ImageSpec(False, True, "L"),
    "rgb": _ImageSpec(False, True, "RGB"), "rgba": _ImageSpec(False, True, "RGBA"),
    "torchl8": _ImageSpec(True, False, "L"), "torchrgb8": _ImageSpec(True, False, "RGB"),
    "torchrgba8": _ImageSpec(True, False, "RGBA"), "torchl": _ImageSpec(True, True, "L"),
    "torchrgb": _ImageSpec(True, True, "RGB"), "torch": _ImageSpec(True, True, "RGB"),
    "torchrgba": _ImageSpec(True, True, "RGBA"), "image": _ImageSpec(False, False, None),
}
_PIL_SPECS = {"pill": "l8", "pil": "rgb8", "pilrgb": "rgb8", "pilrgba": "rgba8"}


def split_key(name: str) -> tuple[str, str] | None:
    """``(key, field)`` of a member's name as WebDataset splits it; ``None`` if it has no
    extension.

    Example:
        >>> split_key("images/cat01.seg.png"), split_key("a.v1/b.JPG"), split_key("README")
        (('images/cat01', 'seg.png'), ('a.v1/b', 'JPG'), None)
    """
    match = _KEY_AND_FIELD.match(name)
    return None if match is None else (match.group(1), match.group(2))


def _skipped(name: str) -> bool:
    return ("/" not in name and name.startswith("__") and name.endswith("__")) or \
        _META.match(name) is not None


def _compression(path: str, compression_type: str | None) -> str:
    if compression_type is not None:
        return compression_name(compression_type)
    return "GZIP" if path.endswith((".gz", ".tgz")) else ""


# A number field in the form every common writer uses (octal digits between spaces, then a
# NUL and anything): tarfile's nti() reads it as int(digits or "0", 8). Other forms (base-256,
# tabs, underscores, garbage) go through tarfile.TarInfo.frombuf, which reads or refuses them.
_PLAIN_NUMBER = re.compile(rb"[ ]*[0-7]*[ ]*(?:\0[\s\S]*)?")
# (start, end) of mode, uid, gid, size, mtime, chksum, devmajor and devminor.
_NUMBER_FIELDS = ((100, 108), (108, 116), (116, 124), (124, 136), (136, 148), (148, 156),
                  (329, 337), (337, 345))
# What tarfile, GNU tar and libarchive write in the ustar and GNU formats: mode, uid, gid,
# size (group 1), mtime and the checksum (group 2, six digits, NUL, space), from offset 100;
# then devmajor and devminor (digits, or all NUL) from offset 329.
_WRITTEN = re.compile(rb"[0-7]{7}\0[0-7]{7}\0[0-7]{7}\0([0-7]{11})\0[0-7]{11}\0"
                      rb"([0-7]{6})\0 ")
_WRITTEN_DEVICE = re.compile(rb"(?:[0-7]{7}\0|\0{8}){2}")
_ZERO_BLOCK = bytes(_BLOCK)
_EXTENDED_TYPES = frozenset({tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE, tarfile.XGLTYPE,
                             tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGLINK})
_GNU_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.GNUTYPE_SPARSE)


def _number(block: bytes, start: int, end: int) -> int:
    field = block[start:end]
    nul = field.find(0)
    digits = (field if nul < 0 else field[:nul]).strip()
    return int(digits, 8) if digits else 0


def _text(block: bytes, start: int, end: int) -> str:
    nul = block.find(0, start, end)
    return block[start:end if nul < 0 else nul].decode("utf-8", "surrogateescape")


def parse_header(block: bytes) -> tuple[str, bytes, int] | None:
    """``(name, type, size)`` of a 512-byte tar header as :meth:`tarfile.TarInfo.frombuf`
    reads it (ustar prefix joined, a V7 directory's slash dropped); ``None`` for the
    all-zero end-of-archive block.

    Headers in the form every common writer uses are read here with slicing (frombuf
    decodes twenty fields, most of which a WebDataset never uses); any other form goes
    through frombuf, so the result and the errors are frombuf's.

    Raises:
        tarfile.HeaderError: as frombuf (``"bad checksum"``, ``"invalid header"``,
            ``"truncated header"``).

    Example:
        >>> info = tarfile.TarInfo("dir/a.txt")
        >>> info.size = 3
        >>> parse_header(info.tobuf(tarfile.USTAR_FORMAT))
        ('dir/a.txt', b'0', 3)
        >>> parse_header(bytes(512)) is None
        True
    """
    if len(block) != _BLOCK or block[156:157] == tarfile.GNUTYPE_SPARSE:
        return _frombuf(block)
    if block == _ZERO_BLOCK:
        return None
    written = _WRITTEN.match(block, 100)
    if written is not None and _WRITTEN_DEVICE.match(block, 329) is not None:
        size, checksum = int(written[1], 8), int(written[2], 8)
    else:
        match = _PLAIN_NUMBER.fullmatch
        for start, end in _NUMBER_FIELDS:
            if match(block, start, end) is None:
                return _frombuf(block)
        size, checksum = _number(block, 124, 136), _number(block, 148, 156)
    # The unsigned sum, the checksum field counted as spaces (frombuf also accepts the
    # signed one, which old Sun tars wrote: it decides any header this sum does not match).
    if checksum != sum(block) - sum(block[148:156]) + 256:
        return _frombuf(block)
    name = _text(block, 0, 100)
    kind = block[156:157]
    if kind == tarfile.AREGTYPE and name.endswith("/"):
        kind = tarfile.DIRTYPE
    if kind == tarfile.DIRTYPE:
        name = name.rstrip("/")
    if block[345] and kind not in _GNU_TYPES:  # a ustar prefix
        name = _text(block, 345, 500) + "/" + name
    return name, kind, size


def _frombuf(block: bytes) -> tuple[str, bytes, int] | None:
    try:
        info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
    except tarfile.EOFHeaderError:
        return None
    return info.name, info.type, info.size


def _pax_records(data: bytes, path: str, offset: int) -> dict[str, str]:
    """The ``key=value`` records of a PAX extended header (``"%d %s=%s\\n"`` each)."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos] != 0:
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space])
        except ValueError:
            length = 0
        record = data[space + 1:pos + length]
        if space < 0 or length <= 0 or not record.endswith(b"\n") or b"=" not in record:
            raise DataLossError(f"WebDataset: damaged PAX header at offset {offset} of {path}",
                                path=path, offset=offset)
        key, _, value = record[:-1].partition(b"=")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8",
                                                                      "surrogateescape")
        pos += length
    return records


def _pax_size(value: str, path: str, offset: int) -> int:
    """A PAX ``size`` record's value: decimal digits (tarfile would read damage as 0)."""
    if not (value.isascii() and value.isdigit()):
        problem = f"its size {value[:40]!r} is not a byte count"
    elif len(value) > 30:  # no archive is this large; and int() refuses 4,300 digits
        problem = f"its size ({len(value)} digits) is larger than any archive"
    else:
        return int(value)
    raise DataLossError(f"WebDataset: damaged PAX header at offset {offset} of {path}: "
                        f"{problem}", path=path, offset=offset)


class _Member:
    """One tar member: where its headers start, its name, type and size."""

    __slots__ = ("name", "offset", "size", "type")

    def __init__(self, offset: int, name: str, kind: bytes, size: int) -> None:
        self.offset, self.name, self.type, self.size = offset, name, kind, size


class _TarStream:
    """Reads one archive header by header from ``offset`` (a member's first header)."""

    def __init__(self, path: str, compression: str, offset: int) -> None:
        self.path = path
        self._file: IO[bytes] = open_file(path, "rb", compression)
        self.offset = 0  # of the next byte read, in the (decompressed) archive
        self.last: str | None = None  # the last member read whole, for messages
        # The archive's length where it is known (an uncompressed file): a size field is
        # checked against it before anything is read or sought.
        self._size: int | None = None
        try:
            if not compression and self._file.seekable():
                self._size = self._file.seek(0, io.SEEK_END)
                self._file.seek(0)
        except (OSError, ValueError):
            self._size = None
        if offset:
            self._skip(offset)

    def close(self) -> None:
        self._file.close()

    def _skip(self, count: int) -> None:
        """Move ``count`` bytes on, stopping at the end of the file (the next header read
        reports where the archive ends)."""
        if self._size is not None:
            count = min(count, max(self._size - self.offset, 0))
            self._file.seek(self.offset + count)
            self.offset += count
            return
        while count > 0:
            got = len(self._file.read(min(count, _SKIP_CHUNK)))
            if not got:
                break
            self.offset += got
            count -= got

    def _truncated(self, size: int, what: str, start: int, available: int) -> DataLossError:
        after = f" (after member {self.last!r})" if self.last else ""
        return DataLossError(
            f"WebDataset: truncated archive {self.path}: {what} at offset {start} needs "
            f"{size} bytes where the file has {available} left{after}",
            path=self.path, offset=start)

    def _check_size(self, size: int, what: str, start: int) -> None:
        """Refuse a size the rest of the file cannot hold before reading or seeking by it:
        a damaged size field would otherwise allocate (or seek) whatever it says."""
        if self._size is not None and size > self._size - self.offset:
            raise self._truncated(size, what, start, max(self._size - self.offset, 0))

    def _read(self, size: int, what: str, start: int) -> bytes:
        """``size`` bytes, all of them: a shorter file is a truncated archive."""
        self._check_size(size, what, start)
        # A stream of unknown length (compressed) is read in chunks, so that memory grows
        # with the bytes it holds, not with the size a header claims.
        most = size if self._size is not None else _SKIP_CHUNK
        chunks = []
        remaining = size
        while remaining > 0:
            chunk = self._file.read(min(remaining, most))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        self.offset += size - remaining
        if remaining:
            raise self._truncated(size, what, start, size - remaining)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _pass(self, size: int, what: str, start: int) -> None:
        """Move ``size`` bytes on without keeping them: a shorter file is a truncated
        archive."""
        self._check_size(size, what, start)
        if self._size is not None:
            self._file.seek(self.offset + size)
            self.offset += size
            return
        remaining = size
        while remaining > 0:
            got = len(self._file.read(min(remaining, _SKIP_CHUNK)))
            if not got:
                raise self._truncated(size, what, start, size - remaining)
            self.offset += got
            remaining -= got

    def _header(self) -> tuple[str, bytes, int] | None:
        """The next 512-byte header's ``(name, type, size)``; ``None`` at the end-of-archive
        block."""
        start = self.offset
        block = self._file.read(_BLOCK)
        while 0 < len(block) < _BLOCK:
            more = self._file.read(_BLOCK - len(block))
            if not more:
                break
            block += more
        self.offset += len(block)
        after = f" (after member {self.last!r})" if self.last else " (its first header)"
        if not block:
            if start == 0:
                raise DataLossError(f"WebDataset: {self.path} is empty, not a tar archive",
                                    path=self.path, offset=0)
            raise DataLossError(
                f"WebDataset: truncated archive {self.path}: it ends at offset {start} "
                f"without the end-of-archive block{after}", path=self.path, offset=start)
        problem = "not a tar archive" if start == 0 else "a damaged tar header"
        try:
            header = parse_header(block)
        except tarfile.HeaderError as error:
            raise DataLossError(
                f"WebDataset: {problem} at offset {start} of {self.path}{after}: {error}",
                path=self.path, offset=start) from None
        if header is not None and header[2] < 0:  # a base-256 size field can be negative
            raise DataLossError(
                f"WebDataset: {problem} at offset {start} of {self.path}{after}: its size "
                f"field is negative ({header[2]})", path=self.path, offset=start)
        if header is None and self._size is None:
            # A compressed stream is checked (gzip's CRC and length) only at its end: a flip
            # in a member's data can decompress without an error until then.
            while self._file.read(_SKIP_CHUNK):
                pass
        return header

    def next_member(self) -> _Member | None:
        """The next member's header (long names resolved); ``None`` at the archive's end."""
        start = self.offset
        name: str | None = None
        size: int | None = None
        while True:
            header_at = self.offset
            header = self._header()
            if header is None:
                if header_at != start:
                    raise DataLossError(
                        f"WebDataset: damaged archive {self.path}: the extended header at "
                        f"offset {start} is followed by the end of the archive, not by a "
                        "member", path=self.path, offset=start)
                return None
            header_name, kind, data_size = header
            if kind in _EXTENDED_TYPES:
                # The whole blocks, as tarfile reads them: a long name ends at its first NUL
                # and PAX records at the padding, even past the declared size.
                payload = self._read(data_size + -data_size % _BLOCK, "an extended header",
                                     header_at)
                # Where extended headers follow each other, the first one's name and size
                # count, as tarfile applies them (each to what the next ones give).
                if kind == tarfile.GNUTYPE_LONGNAME and name is None:
                    name = payload.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
                elif kind in (tarfile.XHDTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.XGLTYPE):
                    records = _pax_records(payload, self.path, header_at)
                    self._unsupported_pax(records, kind, header_at)
                    if kind == tarfile.XGLTYPE:
                        continue  # what remains of a global header names no sample's file
                    if name is None and "path" in records:
                        name = records["path"].rstrip("/")
                    if size is None and "size" in records:
                        size = _pax_size(records["size"], self.path, header_at)
                continue
            if kind == tarfile.GNUTYPE_SPARSE:
                raise InvalidArgumentError(
                    f"WebDataset: member {header_name!r} at offset {start} of {self.path} is "
                    "a GNU sparse file, which WebDataset shards do not use", path=self.path,
                    offset=start)
            if kind not in tarfile.REGULAR_TYPES and kind in tarfile.SUPPORTED_TYPES:
                # Links, folders, devices and FIFOs have no data whatever their size field
                # says, as tarfile (so webdataset) and libarchive read them.
                size = data_size = 0
            return _Member(start, name if name is not None else header_name, kind,
                           size if size is not None else data_size)

    def _unsupported_pax(self, records: dict[str, str], kind: bytes, offset: int) -> None:
        """Refuse PAX records that would change what tarfile reads in ways no WebDataset
        writer uses: a global header's path or size (every later member renamed or
        resized) and GNU sparse files."""
        sparse = [key for key in records if key.startswith("GNU.sparse.")]
        common = [key for key in ("path", "size") if key in records] \
            if kind == tarfile.XGLTYPE else []
        if sparse or common:
            what = f"GNU sparse records {sparse}" if sparse else \
                f"a global {' and '.join(common)} for every member after it"
            raise InvalidArgumentError(
                f"WebDataset: the PAX header at offset {offset} of {self.path} sets {what}, "
                "which WebDataset shards do not use", path=self.path, offset=offset)

    def read_data(self, member: _Member) -> bytes:
        what = f"member {member.name!r}"
        data = self._read(member.size, what, member.offset)
        self._pass(-member.size % _BLOCK, what, member.offset)
        self.last = member.name
        return data

    def skip_data(self, member: _Member) -> None:
        # Data and padding at once: seeking past the end would hide a truncated member.
        self._pass(member.size + -member.size % _BLOCK, f"member {member.name!r}",
                   member.offset)
        self.last = member.name


class WebDataset(FileReaderDataset):
    """The samples of WebDataset ``.tar`` shards: one dict per sample.

    Each element maps ``"__key__"`` (the sample's key) and ``"__url__"`` (the shard's path
    as given) to ``bytes``, then each field (the file extension, lower-cased, in archive
    order) to the file's contents as ``bytes`` -- text as bytes, as every feedline reader
    gives it.

    Args:
        urls: A path or fsspec URL of a shard, a list of them, or a
            :class:`~feedline.Dataset` of them. Shards ending in ``.gz``/``.tgz`` are read
            as gzip-compressed archives.
        fields: Keep only these fields, in this order (default: every field, in archive
            order). A sample without one of them is an error naming the shard and the key
            (the next sample follows), so that every element has the same structure.
        decode: ``None`` keeps every field as bytes. Otherwise one of webdataset's image
            specs, with its meaning, decodes the image fields (``jpg``, ``jpeg``, ``png``,
            ``ppm``, ``pgm``, ``pbm``, ``pnm``, ``bmp``, ``gif``, ``webp``): ``"l8"``,
            ``"rgb8"``, ``"rgba8"`` give ``uint8`` arrays ``(height, width)`` (``l``) or
            ``(height, width, 3 or 4)``; ``"l"``, ``"rgb"``, ``"rgba"`` the same as
            ``float32`` in ``[0, 1]``; ``"torchl8"``, ``"torchrgb8"``, ``"torchrgba8"``,
            ``"torchl"``, ``"torchrgb"`` (also ``"torch"``), ``"torchrgba"`` the same
            channels first, ``(channels, height, width)``, as NumPy arrays
            (:mod:`feedline.torch` turns them into tensors without a copy). Feedline's
            own ``"image"`` gives ``uint8`` ``(height, width, channels)`` with the image's
            own channels. webdataset's ``"pil*"`` specs give PIL images, which an element
            cannot hold: they are refused. The integer fields (``cls``, ``cls2``,
            ``class``, ``count``, ``index``, ``inx``, ``id``) become ``int64`` scalars.
        compression_type: ``None`` decides by the name; ``""`` or ``"GZIP"`` force it.
        num_parallel_reads: ``None`` reads the shards one after the other; ``n`` reads
            ``n`` at once and interleaves their samples one by one.
        name: Name of this stage in statistics and errors.

    Unlike the ``webdataset`` package, samples never continue from one shard into the
    next (each shard stands alone, so shards can be split among workers), and
    ``"__local_path__"`` is not added. The dataset is split among workers by shard.
    Checkpoints store the shard index, the offset of the next sample's first header and
    the number of samples read from the shard.

    Example:
        >>> import feedline as fl, io, tarfile, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "shard-000.tar")
        >>> with tarfile.open(path, "w") as tar:
        ...     for name, data in [("a.txt", b"cat"), ("a.cls", b"1"), ("b.txt", b"dog"),
        ...                        ("b.cls", b"0")]:
        ...         info = tarfile.TarInfo(name)
        ...         info.size = len(data)
        ...         tar.addfile(info, io.BytesIO(data))
        >>> [s["txt"] for s in fl.WebDataset(path)]
        [b'cat', b'dog']
        >>> next(iter(fl.WebDataset(path, decode="rgb")))["cls"]
        np.int64(1)
    """

    READER: ClassVar[str] = "WebDataset"

    def __init__(self, urls: Any, fields: Sequence[str] | None = None,
                 decode: str | None = None, compression_type: str | None = None,
                 num_parallel_reads: int | None = None, name: str | None = None) -> None:
        if isinstance(fields, str):
            raise TypeError(f"WebDataset: fields must be a list of field names, not a single "
                            f"string ({fields!r}); use [{fields!r}]")
        self.fields = None if fields is None else tuple(str(f).lower() for f in fields)
        if decode in _PIL_SPECS:
            raise ValueError(
                f"WebDataset: decode={decode!r} gives PIL images in webdataset, which cannot "
                f"be part of an element; decode={_PIL_SPECS[decode]!r} gives their pixels "
                "(PIL.Image.fromarray makes the image)")
        if decode is not None and decode not in _IMAGE_SPECS:
            raise ValueError(f"WebDataset: decode must be None or one of webdataset's image "
                             f"specs {sorted(_IMAGE_SPECS)}; found {decode!r}")
        self.decode = decode
        self.compression_type = None if compression_type is None else compression_name(
            compression_type)
        self.name = name or "webdataset"
        self._setup(urls, num_parallel_reads,
                    {"fields": self.fields, "decode": decode,
                     "compression_type": self.compression_type})

    @property
    def _start(self) -> dict[str, Any]:
        return {"offset": 0, "sample": 0}

    def _open(self, path: str, position: dict[str, Any]) -> RecordCursor:
        return _SampleCursor(self, path, position)


class _SampleCursor(RecordCursor):
    """One shard, read sample by sample."""

    def __init__(self, node: WebDataset, path: str, position: dict[str, Any]) -> None:
        self._path = path
        self._url = path.encode("utf-8", "surrogateescape")
        self._fields = node.fields
        self._image = None if node.decode is None else _IMAGE_SPECS[node.decode]
        self._stream = _TarStream(path, _compression(path, node.compression_type),
                                  int(position["offset"]))
        self._offset = int(position["offset"])  # of the next sample's first header
        self._sample = int(position["sample"])  # samples handed out from this shard
        self._ahead: tuple[_Member, str, str] | None = None  # next sample's first file
        self._ended = False
        self.recoverable = False

    def _next_file(self) -> tuple[_Member, str, str] | None:
        """The next file that belongs to a sample, its data not read yet: ``(member, key,
        field)``. (A file of the next sample ends the current one before its data is read,
        so damage in that data comes after the complete sample.)"""
        stream = self._stream
        while True:
            member = stream.next_member()
            if member is None:
                return None
            split = split_key(member.name) if member.type in tarfile.REGULAR_TYPES else None
            if split is None or _skipped(member.name) or (
                    self._fields is not None and split[1].lower() not in self._fields):
                stream.skip_data(member)
                continue
            return member, split[0], split[1].lower()

    def read(self) -> dict[str, Any]:
        self.recoverable = False
        first = self._ahead
        self._ahead = None
        if first is None:
            if self._ended:
                raise StopIteration
            first = self._next_file()
            if first is None:
                self._ended = True
                self._offset = self._stream.offset - _BLOCK
                raise StopIteration
        member, key, field = first
        self._offset = member.offset
        sample: dict[str, Any] = {"__key__": key.encode("utf-8", "surrogateescape"),
                                  "__url__": self._url, field: self._stream.read_data(member)}
        while True:
            following = self._next_file()
            if following is None:
                self._ended = True
                next_offset = self._stream.offset - _BLOCK  # the end-of-archive block
                break
            if following[1] != key:
                self._ahead = following
                next_offset = following[0].offset
                break
            if following[2] in sample:
                raise InvalidArgumentError(
                    f"WebDataset: {self._path}: sample {key!r} has two {following[2]!r} "
                    f"files (member {following[0].name!r} at offset {following[0].offset}); "
                    "the files of a sample must have different extensions", path=self._path,
                    offset=following[0].offset, record_index=self._sample)
            sample[following[2]] = self._stream.read_data(following[0])
        index = self._sample
        self._offset = next_offset
        self._sample += 1
        if self._fields is not None:
            missing = [f for f in self._fields if f not in sample]
            if missing:
                self.recoverable = True
                raise InvalidArgumentError(
                    f"WebDataset: sample {key!r} (sample {index} of {self._path}) has no "
                    f"{missing} field(s); it has {sorted(k for k in sample if k[:2] != '__')}"
                    f" and fields={list(self._fields)} asks for them", path=self._path,
                    record_index=index)
            sample = {"__key__": sample["__key__"], "__url__": self._url,
                      **{f: sample[f] for f in self._fields}}
        if self._image is not None:
            self._decode(sample, key, index, self._image)
        return sample

    def _decode(self, sample: dict[str, Any], key: str, index: int, spec: _ImageSpec) -> None:
        for field, value in sample.items():
            if field[:2] == "__":
                continue
            last = field.rsplit(".", 1)[-1]
            try:
                if last in _IMAGE_FIELDS:
                    sample[field] = _decode_image(value, spec)
                elif last in _INT_FIELDS:
                    sample[field] = np.int64(int(value))
            except Exception as error:  # noqa: BLE001 - any decoder failure is named
                self.recoverable = True
                raise InvalidArgumentError(
                    f"WebDataset: cannot decode field {field!r} of sample {key!r} (sample "
                    f"{index} of {self._path}): {error}", path=self._path,
                    record_index=index) from error

    def position(self) -> dict[str, Any]:
        return {"offset": self._offset, "sample": self._sample}

    def close(self) -> None:
        self._stream.close()


def _decode_image(contents: bytes, spec: _ImageSpec) -> np.ndarray:
    """An encoded image as webdataset's image spec ``spec`` gives it: JPEG, PNG, GIF (its
    first frame), BMP and WebP decoded by :func:`feedline.image.decode_image` as TensorFlow
    decodes them (within its pixel limits), other formats (PNM) by Pillow; then converted to the spec's mode as
    Pillow's ``Image.convert`` does, scaled to ``[0, 1]`` and laid out channels first as
    webdataset does."""
    from feedline.image.codecs import (_BMP_MAGIC, _GIF_MAGICS, _JPEG_MAGIC, _PNG_MAGIC,
                                       _is_webp, decode_image)

    # WebP too: decode_image holds it to feedline.image's pixel limits (Pillow's own limit
    # is only a warning below twice its size).
    if contents.startswith((_JPEG_MAGIC, _PNG_MAGIC, *_GIF_MAGICS, _BMP_MAGIC)) \
            or _is_webp(contents):
        pixels = _convert(decode_image(contents, channels=0, expand_animations=False),
                          spec.mode)
    else:
        import io

        from PIL import Image

        with Image.open(io.BytesIO(contents)) as picture:
            mode = spec.mode
            if mode is None:
                mode = picture.mode if picture.mode in ("L", "RGB", "RGBA") else "RGB"
            pixels = np.asarray(picture.convert(mode))
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
    if spec.mode == "L":
        pixels = pixels[:, :, 0]  # webdataset's "l" images have no channel axis
    if spec.scaled:
        pixels = pixels.astype(np.float32) / np.float32(255.0)
    if spec.channels_first and pixels.ndim == 3:
        pixels = pixels.transpose(2, 0, 1)
    return np.ascontiguousarray(pixels)


def _convert(pixels: np.ndarray, mode: str | None) -> np.ndarray:
    """``uint8`` pixels ``(height, width, 1 to 4)`` converted to Pillow ``mode`` as
    ``Image.convert`` converts L, LA, RGB and RGBA (alpha dropped without blending, added
    opaque; gray from ITU-R 601-2 luma with Pillow's rounding)."""
    channels = pixels.shape[-1]
    if mode is None:
        return pixels
    if mode == "L":
        if channels <= 2:
            return pixels[:, :, :1]
        wide = pixels.astype(np.uint32)
        luma = (wide[:, :, 0] * 19595 + wide[:, :, 1] * 38470 + wide[:, :, 2] * 7471
                + 0x8000) >> 16
        return luma.astype(np.uint8)[:, :, None]
    color = pixels[:, :, :3] if channels >= 3 else np.repeat(pixels[:, :, :1], 3, axis=2)
    if mode == "RGB":
        return color
    alpha = pixels[:, :, -1:] if channels in (2, 4) else np.full_like(pixels[:, :, :1], 255)
    return np.concatenate([color, alpha], axis=2)
