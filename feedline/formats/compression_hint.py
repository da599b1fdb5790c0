"""The likely cause of a record file that is damaged from its first byte: it is compressed and
was read without ``compression_type``. One wording for every reader that reports it."""

from __future__ import annotations

from typing import Any

_GZIP_MAGIC = b"\x1f\x8b"


def compression_hint(head: bytes) -> str:
    """What to do when a file read uncompressed starts with ``head``: a GZIP or ZLIB header
    means a compressed file read without ``compression_type``; else ``""``.

    Example:
        >>> import gzip, zlib
        >>> compression_hint(gzip.compress(b"x"))
        "this looks like a GZIP file; pass compression_type='GZIP'"
        >>> compression_hint(zlib.compress(b"x"))
        "this looks like a ZLIB file; pass compression_type='ZLIB'"
        >>> compression_hint(b"\\x05\\x00\\x00\\x00")
        ''
    """
    if head[:2] == _GZIP_MAGIC:
        return "this looks like a GZIP file; pass compression_type='GZIP'"
    # RFC 1950: deflate (method 8), a window of at most 32 KiB, a header check multiple of 31.
    if len(head) >= 2 and head[0] & 0x0F == 8 and head[0] >> 4 <= 7 \
            and (head[0] << 8 | head[1]) % 31 == 0:
        return "this looks like a ZLIB file; pass compression_type='ZLIB'"
    return ""


def file_compression_hint(path: Any) -> str:
    """:func:`compression_hint` of the first bytes of the file at ``path`` (a local path or
    an fsspec URL), or ``""`` when it cannot be read.

    Readers call it when an uncompressed read fails at offset 0, and add it to their
    :class:`~feedline.core.errors.DataLossError`'s message.

    Example:
        >>> import gzip, os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "records.tfrecord")
        >>> with gzip.open(path, "wb") as f:
        ...     _ = f.write(b"data")
        >>> file_compression_hint(path)
        "this looks like a GZIP file; pass compression_type='GZIP'"
    """
    from feedline.formats.files import open_file  # files imports fsspec: only on this error

    try:
        with open_file(path, "rb") as file:
            return compression_hint(file.read(2))
    except OSError:
        return ""
