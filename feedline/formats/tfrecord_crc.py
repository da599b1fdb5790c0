"""The checksum of TFRecord framing: CRC32C, in C, and the masked form a record stores.

Both the sequential reader and writer (:mod:`feedline.formats.tfrecord`) and the record index
(:mod:`feedline.formats.tfrecord_index`) check frames with it, so it lives below both.

Example:
    >>> hex(masked_crc32c(b"")), crc32c(b"123456789") == 0xE3069283
    ('0xa282ead8', True)
"""

from __future__ import annotations

from typing import Any

from feedline.core import checksum

MASK_DELTA = 0xA282EAD8
"""Added to the rotated CRC to mask it (TensorFlow's ``kMaskDelta``)."""


def _load_crc32c() -> Any:
    # A C implementation is required: a pure-Python CRC would be ~1000x slower than reading.
    if not checksum.IN_C:
        raise ImportError(
            "feedline needs a C implementation of CRC32C to read TFRecord files, but "
            "google-crc32c was installed without its C extension and the 'crc32c' package "
            "is missing; reinstall google-crc32c from a wheel or `pip install crc32c`")
    return checksum.value


crc32c = _load_crc32c()
"""The CRC32C of a read-only buffer (``bytes``), in C."""


def masked_crc32c(data: bytes | bytearray) -> int:
    """The masked CRC32C TFRecord stores after the length and after the data.

    Example:
        >>> hex(masked_crc32c(b"")), hex(masked_crc32c(bytearray()))
        ('0xa282ead8', '0xa282ead8')
    """
    crc = crc32c(bytes(data))  # google-crc32c takes read-only buffers only
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF
