"""Elements as bytes for snapshot and save files: raw array data, no pickle.

A chunk file stores its elements' *structure* once (the first element's nesting, as
:mod:`feedline.core.state_codec` encodes it, with each leaf replaced by its number) and then
each element as its leaves only, one after the other:

``a``  a numeric or boolean array: dtype, shape, raw C-order bytes
``A``  the same, with padding (a length byte, then zeros) before the bytes, so that they
       start :data:`ALIGN` bytes into the element: large arrays, so that reading can hand
       them out as aligned views
``T``  like ``A``, for a large array whose memory is C-ordered after an axis permutation
       (a transposed or channels-first array): after the shape, the permutation (a byte
       per axis), and the bytes as they lie in memory; read back with the same strides,
       and never copied into C order on either side
``o``  an object array of ``bytes``: shape, the lengths, the bytes
``b``  ``bytes``; ``s`` a ``str`` (UTF-8)
``j``  any other leaf :mod:`feedline.core.state_codec` stores (Python ``int``, ``float`` and
       ``bool`` as they are, the ``RaggedValues`` of ``parse_example``, the datasets
       ``window`` yields, object arrays of those): the length, then that encoding as JSON

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

from feedline.core.errors import CheckpointError, DataLossError
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
    """Append ``element``'s leaves to ``out`` (a copy of every byte; see :func:`element_parts`
    for the form writers use).

    Example:
        >>> out = bytearray(); encode_element((np.arange(2), b"hi"), out)
        >>> decode_leaves(bytes(out), 0, 2, "x")[0][0].tolist()
        [0, 1]
    """
    parts, _ = element_parts(element)
    for part in parts:
        out += byte_view(part)


REFERENCE_BYTES = 64 << 10
"""Array data at least this large is referenced by :func:`element_parts`, never copied."""
ALIGN = 64
"""Array data of :data:`ALIGN_BYTES` or more starts at a multiple of this within its element
(a cache line; more than any dtype needs), so views of it are aligned."""
ALIGN_BYTES = 4096


def element_parts(element: Any) -> tuple[list[Any], int]:
    """``element`` encoded as a list of buffers, and their total size.

    Leaf headers and small leaves are gathered into ``bytearray`` parts; the data of large
    arrays (:data:`REFERENCE_BYTES` or more) are byte views of the arrays themselves, in
    the order their memory lies (a transposed array is written as it is, leaf kind ``T``),
    or, for arrays strided in no such order, the arrays (:func:`byte_view` copies them into
    C order on the writer's threads): encoding copies nothing big, and the writer
    compresses or writes the views directly, on its threads. The element's arrays must not
    change while the parts are in use. Arrays of :data:`ALIGN_BYTES` or more start at a
    multiple of :data:`ALIGN` within the element.

    Example:
        >>> parts, size = element_parts((np.zeros(100_000, np.uint8), b"hi"))
        >>> [type(p).__name__ for p in parts], size
        (['bytearray', 'memoryview', 'bytearray'], 100075)
    """
    parts: list[Any] = []
    out = bytearray()
    done = 0  # bytes in ``parts`` before ``out``
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
        elif type(leaf) in _JSON_LEAVES or not isinstance(leaf, np.ndarray | np.generic | complex):
            _encode_json(leaf, out)
        else:
            array = np.asarray(leaf)
            if array.dtype == object:
                if all(isinstance(value, bytes) for value in array.reshape(-1).tolist()):
                    _encode_objects(array, out)
                else:
                    _encode_json(leaf, out)
                continue
            if array.dtype.kind not in "biufcmMSUV" or array.dtype.hasobject:
                raise TypeError(f"cannot save a leaf of dtype {array.dtype}")
            dtype = array.dtype.str.encode()
            aligned = array.nbytes >= ALIGN_BYTES
            order = _memory_order(array) if array.nbytes >= REFERENCE_BYTES else None
            out += b"T" if order is not None else b"A" if aligned else b"a"
            out += bytes([len(dtype)])
            out += dtype
            out += bytes([array.ndim])
            for size in array.shape:
                out += _U64.pack(size)
            if order is not None:
                out += bytes(order)
                array = array.transpose(order)  # C-contiguous: its memory, as it lies
            if aligned:
                pad = -(done + len(out) + 1) % ALIGN
                out += bytes([pad])
                out += bytes(pad)
            if not array.size:
                continue
            if array.nbytes >= REFERENCE_BYTES:
                parts.append(out)
                # As it is: a strided one is copied by whoever writes it (a writer's
                # thread, with the GIL released), not here.
                parts.append(array if not array.flags.c_contiguous else byte_view(array))
                done += len(out) + array.nbytes
                out = bytearray()
            else:
                out += byte_view(array)
    if out:
        parts.append(out)
    return parts, sum(len(part) if isinstance(part, bytearray) else part.nbytes
                      for part in parts)


def _memory_order(array: np.ndarray) -> tuple[int, ...] | None:
    """The axis permutation after which ``array`` is C-contiguous, if it is not already
    but one exists (``None`` otherwise: C-ordered, or truly strided)."""
    if array.flags.c_contiguous or array.ndim < 2 or min(array.strides) < 0:
        return None
    order = tuple(int(i) for i in np.argsort([-s for s in array.strides], kind="stable"))
    return order if array.transpose(order).flags.c_contiguous else None


def byte_view(part: Any) -> Any:
    """The bytes of a part :func:`element_parts` gave: itself, or an array's data in C order
    as a byte memoryview (copied only when the array is not C-contiguous: a strided array
    no axis permutation makes C-contiguous).

    Example:
        >>> bytes(byte_view(np.array([[1, 2], [3, 4]], np.uint8).T))
        b'\\x01\\x03\\x02\\x04'
    """
    if not isinstance(part, np.ndarray):
        return part
    # Bytes as uint8 (a memoryview of datetime or void data cannot be taken).
    return memoryview(np.ascontiguousarray(part).reshape(-1).view(np.uint8))


_JSON_LEAVES = frozenset({int, float, bool})
"""Python scalars: kept as they are (``j``), not turned into NumPy scalars."""


def _encode_json(leaf: Any, out: bytearray) -> None:
    try:
        data = json.dumps(encode(leaf), separators=(",", ":")).encode()
    except (CheckpointError, TypeError, ValueError) as error:
        raise TypeError(f"cannot save a leaf of type {type(leaf).__name__}: {error}") from None
    out += b"j"
    out += _U64.pack(len(data))
    out += data


def _encode_objects(array: np.ndarray, out: bytearray) -> None:
    values = array.reshape(-1).tolist()
    out += b"o"
    out += bytes([array.ndim])
    for size in array.shape:
        out += _U64.pack(size)
    out += np.array([len(v) for v in values], dtype="<u8").tobytes()
    out += b"".join(values)


_DTYPES: dict[bytes, np.dtype] = {}


def _dtype(text: bytes) -> np.dtype:
    # Parsed once per distinct dtype string: decoding is per leaf, on the consumer's thread.
    dtype = _DTYPES.get(text)
    if dtype is None:
        dtype = np.dtype(text.decode())
        if dtype.hasobject:
            raise ValueError("object dtype")
        if len(_DTYPES) < 1024:
            _DTYPES[text] = dtype
    return dtype


def decode_leaves(data: Any, at: int, count: int, where: str,
                  copy: bool = True, types: DeclaredTypes | None = None
                  ) -> tuple[list[Any], int]:
    """``count`` leaves from ``data`` at offset ``at``; returns them and the next offset.

    Args:
        data: The encoded bytes (any buffer).
        at: Where the first leaf starts.
        count: Leaves to decode.
        where: Names the file and element in errors.
        copy: ``True``: arrays are copies (they do not keep ``data`` alive). ``False``:
            arrays are views into ``data`` (zero-copy; writable when ``data`` is), which
            lives as long as any of them does -- except arrays whose data are not aligned
            for their dtype there, which are copied.
        types: The namedtuple classes ``j`` leaves may build (none by default).

    Raises:
        DataLossError: The bytes are not leaves (``where`` names the file and element).

    Example:
        >>> buffer = np.zeros(1 << 14, np.uint8)  # aligned memory
        >>> encoded = bytearray(); encode_element((np.arange(1000), b"x"), encoded)
        >>> buffer[:len(encoded)] = np.frombuffer(encoded, np.uint8)
        >>> (array, raw), end = decode_leaves(buffer, 0, 2, "doc", copy=False)
        >>> int(array.sum()), raw, end == len(encoded), np.shares_memory(array, buffer)
        (499500, b'x', True, True)
    """
    leaves: list[Any] = []
    view = memoryview(data).cast("B") if not isinstance(data, bytes | bytearray) else \
        memoryview(data)
    end = len(view)
    try:
        for _ in range(count):
            kind = view[at]
            at += 1
            if kind in (97, 65, 84):  # b"a", b"A" (padded), b"T" (permuted, padded)
                size = view[at]
                dtype = _dtype(bytes(view[at + 1:at + 1 + size]))
                at += 1 + size
                ndim = view[at]
                shape = struct.unpack_from(f"<{ndim}Q", view, at + 1)
                at += 1 + 8 * ndim
                order = None
                if kind == 84:
                    order = tuple(view[at:at + ndim])
                    if sorted(order) != list(range(ndim)):
                        raise ValueError(f"bad axis permutation {order}")
                    at += ndim
                if kind != 97:
                    at += 1 + view[at]
                nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                if at + nbytes > end:
                    raise ValueError("array data runs past the end")
                if not nbytes:
                    array = np.zeros(shape, dtype=dtype)
                else:
                    array = np.frombuffer(view, dtype=dtype, count=nbytes // dtype.itemsize,
                                          offset=at)
                    if order is None:
                        array = array.reshape(shape)
                    else:  # the memory as written, seen with the array's own axes
                        array = array.reshape([shape[i] for i in order]).transpose(
                            np.argsort(order))
                    if copy or not array.flags.aligned:
                        array = array.copy(order="K")  # the same layout
                leaves.append(array[()] if ndim == 0 else array)
                at += nbytes
            elif kind == 111:  # b"o"
                ndim = view[at]
                shape = struct.unpack_from(f"<{ndim}Q", view, at + 1)
                at += 1 + 8 * ndim
                count_values = int(np.prod(shape, dtype=np.int64))
                lengths = np.frombuffer(view, dtype="<u8", count=count_values, offset=at)
                at += 8 * count_values
                out = np.empty(count_values, dtype=object)
                for i, length in enumerate(lengths.tolist()):
                    if at + length > end:
                        raise ValueError("bytes run past the end")
                    out[i] = bytes(view[at:at + length])
                    at += length
                leaves.append(out.reshape(shape))
            elif kind in (98, 115, 106):  # b"b", b"s", b"j"
                (length,) = _U64.unpack_from(view, at)
                value = bytes(view[at + 8:at + 8 + length])
                if len(value) != length:
                    raise ValueError("bytes run past the end")
                if kind == 106:
                    leaves.append(decode(json.loads(value), types or DeclaredTypes()))
                else:
                    leaves.append(value if kind == 98 else value.decode())
                at += 8 + length
            else:
                raise ValueError(f"unknown leaf kind {bytes([kind])!r}")
    except (ValueError, TypeError, IndexError, struct.error, UnicodeDecodeError,
            CheckpointError, RecursionError) as error:
        raise DataLossError(f"{where}: damaged element data at byte {at}: {error}") from None
    return leaves, at


def header_bytes(header: dict[str, Any]) -> bytes:
    """A JSON header, length-prefixed."""
    text = json.dumps(header, sort_keys=True).encode()
    return _U32.pack(len(text)) + text
