"""Elements as bytes for snapshot and save files: raw array data, no pickle.

A chunk file stores its elements' *structure* once (the first element's nesting, as
:mod:`feedline.core.state_codec` encodes it, with each leaf replaced by its number) and then
each element as its leaves only, one after the other:

``a``  a numeric or boolean array: dtype, shape, raw C-order bytes
``o``  an object array of ``bytes``: shape, the lengths, the bytes
``b``  ``bytes``; ``s`` a ``str`` (UTF-8)

Decoding never imports, looks up or calls anything a file names: it builds NumPy arrays
from dtype strings NumPy parses itself (object dtypes refused), and the few namedtuple
classes the structure names (see :class:`SavedTypes`).
"""

from __future__ import annotations

import collections
import json
import struct
from typing import Any

import numpy as np

from feedline.core.errors import DataLossError
from feedline.core.fingerprint import DeclaredTypes
from feedline.core.state_codec import decode, encode
from feedline.core.structure import flatten, pack_as

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def skeleton(element: Any) -> Any:
    """``element`` with each leaf replaced by its position, JSON-safe (the structure).

    Example:
        >>> skeleton((np.zeros(2), {"a": b"x"}))
        {'t': [{'n': '<i8', 'v': 0}, {'d': [[{'u': 'a'}, {'n': '<i8', 'v': 1}]]}]}
    """
    leaves = flatten(element)
    return encode(pack_as(element, [np.int64(i) for i in range(len(leaves))]))


class SavedTypes(DeclaredTypes):
    """Rebuilds the namedtuple classes a saved structure names, as plain namedtuples.

    A file written by another program names classes this one may not have: ``load`` then
    gives elements with the same name and fields (the class is never imported).
    """

    def __init__(self, declared: DeclaredTypes | None = None) -> None:
        super().__init__(dict(declared.namedtuples) if declared is not None else {})

    def namedtuple(self, name: str, fields: list[str] | None) -> type:
        if name not in self.namedtuples and fields is not None:
            short = name.rsplit(":", 1)[-1].rsplit(".", 1)[-1]
            self.namedtuples[name] = collections.namedtuple(short, fields)  # type: ignore[misc]
        return super().namedtuple(name, fields)


def structure_of(saved: Any, types: DeclaredTypes) -> Any:
    """The structure :func:`skeleton` saved, its leaves being their positions (ints)."""
    return decode(saved, types)


def encode_element(element: Any, out: bytearray) -> None:
    """Append ``element``'s leaves to ``out``.

    Example:
        >>> out = bytearray(); encode_element((np.arange(2), b"hi"), out)
        >>> decode_leaves(bytes(out), 0, 2, "x")[0][0].tolist()
        [0, 1]
    """
    for leaf in flatten(element):
        if isinstance(leaf, bytes):
            out += b"b"
            out += _U64.pack(len(leaf))
            out += leaf
        elif isinstance(leaf, str):
            data = leaf.encode()
            out += b"s"
            out += _U64.pack(len(data))
            out += data
        else:
            array = np.asarray(leaf)
            if array.dtype == object:
                _encode_objects(array, out)
                continue
            if array.dtype.kind not in "biufcmMSUV" or array.dtype.hasobject:
                raise TypeError(f"cannot save a leaf of dtype {array.dtype}")
            dtype = array.dtype.str.encode()
            out += b"a"
            out += bytes([len(dtype)])
            out += dtype
            out += bytes([array.ndim])
            for size in array.shape:
                out += _U64.pack(size)
            out += np.ascontiguousarray(array).data.cast("B") if array.size else b""


def _encode_objects(array: np.ndarray, out: bytearray) -> None:
    values = array.reshape(-1).tolist()
    for value in values:
        if not isinstance(value, bytes):
            raise TypeError(f"cannot save an object array holding {type(value).__name__} "
                            "(only bytes)")
    out += b"o"
    out += bytes([array.ndim])
    for size in array.shape:
        out += _U64.pack(size)
    out += np.array([len(v) for v in values], dtype="<u8").tobytes()
    out += b"".join(values)


def decode_leaves(data: bytes, at: int, count: int, where: str) -> tuple[list[Any], int]:
    """``count`` leaves from ``data`` at offset ``at``; returns them and the next offset.

    Raises:
        DataLossError: The bytes are not leaves (``where`` names the file and element).
    """
    leaves: list[Any] = []
    view = memoryview(data)
    try:
        for _ in range(count):
            kind = data[at:at + 1]
            at += 1
            if kind == b"a":
                size = data[at]
                dtype = np.dtype(bytes(view[at + 1:at + 1 + size]).decode())
                at += 1 + size
                if dtype.hasobject:
                    raise ValueError("object dtype")
                ndim = data[at]
                shape = struct.unpack_from(f"<{ndim}Q", data, at + 1)
                at += 1 + 8 * ndim
                nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                if at + nbytes > len(data):
                    raise ValueError("array data runs past the end")
                # A copy: an element must not keep its whole chunk alive, and it is writable.
                array = np.frombuffer(data, dtype=dtype, count=nbytes // max(dtype.itemsize, 1),
                                      offset=at).reshape(shape).copy() if nbytes else \
                    np.zeros(shape, dtype=dtype)
                leaves.append(array[()] if ndim == 0 else array)
                at += nbytes
            elif kind == b"o":
                ndim = data[at]
                shape = struct.unpack_from(f"<{ndim}Q", data, at + 1)
                at += 1 + 8 * ndim
                count_values = int(np.prod(shape, dtype=np.int64))
                lengths = np.frombuffer(data, dtype="<u8", count=count_values, offset=at)
                at += 8 * count_values
                out = np.empty(count_values, dtype=object)
                for i, length in enumerate(lengths.tolist()):
                    out[i] = bytes(view[at:at + length])
                    at += length
                leaves.append(out.reshape(shape))
            elif kind in (b"b", b"s"):
                (length,) = _U64.unpack_from(data, at)
                value = bytes(view[at + 8:at + 8 + length])
                if len(value) != length:
                    raise ValueError("bytes run past the end")
                leaves.append(value if kind == b"b" else value.decode())
                at += 8 + length
            else:
                raise ValueError(f"unknown leaf kind {kind!r}")
    except (ValueError, TypeError, IndexError, struct.error, UnicodeDecodeError) as error:
        raise DataLossError(f"{where}: damaged element data at byte {at}: {error}") from None
    return leaves, at


def header_bytes(header: dict[str, Any]) -> bytes:
    """A JSON header, length-prefixed."""
    text = json.dumps(header, sort_keys=True).encode()
    return _U32.pack(len(text)) + text
