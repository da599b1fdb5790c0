"""Write iterator states to disk compactly: array and byte payloads unencoded.

``state_dict()`` returns JSON-safe dicts, where the elements a stage must hold (a shuffle
buffer, a window) are base64 text: a third bigger than the data. :func:`save_state`
moves every such payload out of the JSON into a binary section, raw, so the file is
about the size of the buffered data; :func:`load_state` puts them back and returns the
very dict that was saved (its checksum still matches).

File layout: ``b"FLSTATE1"``, the JSON part's length (8 bytes, little-endian), the JSON
part (UTF-8; payloads replaced by ``[offset, length]`` references into the binary
section), then the binary section.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import struct
import tempfile
from typing import IO, Any

from feedline.core.errors import CheckpointError

MAGIC = b"FLSTATE1"
_RAW_KEYS = {"raw": "raw@", "b": "b@", "bl": "bl@"}
"""Encoded-element keys whose base64 payload goes to the binary section, and their
reference keys in the file."""


def _extract(value: Any, blobs: list[bytes], offset: list[int]) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            reference = _RAW_KEYS.get(key)
            # Only encoded elements ({"A": .., "raw": ..} arrays, {"b": ..} bytes, {"bl": ..,
            # "n": ..} buffers of bytes) qualify.
            is_payload = reference is not None and isinstance(item, str) and (
                "A" in value if key == "raw" else
                len(value) == 1 if key == "b" else len(value) == 2 and "n" in value)
            if is_payload:
                try:
                    payload = base64.b64decode(item, validate=True)
                except binascii.Error:
                    payload = None
                if payload is None or base64.b64encode(payload).decode("ascii") != item:
                    out[key] = item  # not canonical base64: kept as text, restored exactly
                    continue
                out[reference] = [offset[0], len(payload)]
                blobs.append(payload)
                offset[0] += len(payload)
            else:
                out[key] = _extract(item, blobs, offset)
        return out
    if isinstance(value, list):
        return [_extract(item, blobs, offset) for item in value]
    return value


def _restore(value: Any, blob: memoryview, name: str) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            original = _ORIGINAL_KEYS.get(key)
            if original is not None:
                start, length = _reference(item, key, name)
                if start + length > len(blob):
                    raise CheckpointError(f"{name}: payload [{start}, {length}] lies outside "
                                          f"its binary section of {len(blob)} bytes (truncated?)")
                out[original] = base64.b64encode(blob[start:start + length]).decode("ascii")
            else:
                out[key] = _restore(item, blob, name)
        return out
    if isinstance(value, list):
        return [_restore(item, blob, name) for item in value]
    return value


_ORIGINAL_KEYS = {reference: key for key, reference in _RAW_KEYS.items()}


def _reference(item: Any, key: str, name: str) -> tuple[int, int]:
    """The ``[offset, length]`` a payload reference holds (two integers >= 0)."""
    if not (isinstance(item, list) and len(item) == 2
            and all(type(n) is int and n >= 0 for n in item)):
        raise CheckpointError(f"{name}: damaged state file: {key!r} must hold a payload "
                              f"reference [offset, length] of two integers >= 0, found "
                              f"{json.dumps(item)[:80]}")
    return item[0], item[1]


def save_state(path: str | os.PathLike[str] | IO[bytes], state: dict[str, Any]) -> int:
    """Write ``state`` (from ``state_dict()``) to ``path``; return the bytes written.

    A path is written atomically (a temporary file renamed into place), so a crash never
    leaves a half-written checkpoint under the final name.

    Example:
        >>> import feedline as fl, os, tempfile
        >>> it = iter(fl.Dataset.range(10).shuffle(5, seed=1))
        >>> _ = next(it)
        >>> path = os.path.join(tempfile.mkdtemp(), "it.state")
        >>> fl.save_state(path, it.state_dict()) > 0
        True
        >>> restored = iter(fl.Dataset.range(10).shuffle(5, seed=1))
        >>> restored.load_state_dict(fl.load_state(path))
        >>> [int(x) for x in restored] == [int(x) for x in it]
        True
    """
    blobs: list[bytes] = []
    skeleton = _extract(state, blobs, [0])
    header = json.dumps(skeleton, separators=(",", ":")).encode("utf-8")
    parts = [MAGIC, struct.pack("<Q", len(header)), header, *blobs]
    if hasattr(path, "write"):
        for part in parts:
            path.write(part)  # type: ignore[union-attr]
        return sum(map(len, parts))
    target = os.fspath(path)  # type: ignore[arg-type]
    directory = os.path.dirname(os.path.abspath(target))
    handle, temp = tempfile.mkstemp(prefix=".state-", dir=directory)
    try:
        with os.fdopen(handle, "wb") as file:
            for part in parts:
                file.write(part)
        os.replace(temp, target)
    except BaseException:
        if os.path.exists(temp):
            os.remove(temp)
        raise
    return sum(map(len, parts))


def load_state(path: str | os.PathLike[str] | IO[bytes]) -> dict[str, Any]:
    """Read a state written by :func:`save_state`, for ``load_state_dict()``.

    Raises:
        CheckpointError: Not a state file, truncated, or its JSON part is not what
            :func:`save_state` writes (the message names the file). Other damage is found by
            the state's own checksum when it is loaded into an iterator.
    """
    if hasattr(path, "read"):
        data = path.read()  # type: ignore[union-attr]
        name = getattr(path, "name", "<file>")
    else:
        name = os.fspath(path)  # type: ignore[arg-type]
        with open(name, "rb") as file:
            data = file.read()
    if data[:len(MAGIC)] != MAGIC or len(data) < len(MAGIC) + 8:
        raise CheckpointError(f"{name} is not a feedline state file (expected {MAGIC!r} at "
                              "byte 0)")
    (length,) = struct.unpack_from("<Q", data, len(MAGIC))
    start = len(MAGIC) + 8
    if start + length > len(data):
        raise CheckpointError(f"{name}: truncated state file (its JSON part needs {length} "
                              f"bytes from byte {start}, the file has {len(data)})")
    try:
        skeleton = json.loads(data[start:start + length])
        state = _restore(skeleton, memoryview(data)[start + length:], name)
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CheckpointError(f"{name}: damaged state file: {error}") from None
    except RecursionError:
        # A state nests a level per stage and per element container: JSON nested as deep as
        # the interpreter's stack is not one.
        raise CheckpointError(f"{name}: damaged state file: its JSON part is nested deeper "
                              "than any state (expected a state_dict())") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{name}: damaged state file (not a state)")
    return state
