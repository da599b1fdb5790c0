"""What a conformance case is, how it runs, and how its result is written down.

A :class:`Case` is a name and a ``build`` function taking a *namespace* (``ns``): the same
function builds the pipeline with TensorFlow (``ns_tf``, when the expected results are
recorded) and with feedline (``ns_fl``, when the tests run). Running a case gives a small
JSON-safe *result*; the recorded TF result and feedline's must be equal.

This module imports neither TensorFlow nor feedline: both sides share it.

Example:
    >>> encode((np.arange(2, dtype=np.int32), b"x"))
    {'tuple': [{'t': 'int32', 's': [2], 'v': [0, 1]}, {'t': 'bytes', 's': [], 'v': 'x'}]}
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_ELEMENTS = 20_000
"""A case reading more elements than this is a mistake (an infinite dataset without take)."""

CHECKPOINT_VARIANTS = ("unused", "fully_used", "exhausted", "multiple_breaks", "reset_restored")
"""TF's ``checkpoint_test_base.default_test_combinations()``, one case each: save and restore
before the first element, after the last one, after the end was seen, at ten break points, and
re-initialize after a restore."""


class UserError(Exception):
    """What a user function raises on purpose (``ns.fail``); its own category, ``user``."""


@dataclass(frozen=True)
class Case:
    """One conformance case.

    Attributes:
        name: Unique within its module; ``<TF test method>[_<parameters>]``.
        build: ``build(ns)`` returns a dataset (modes ``elements`` and ``checkpoint_*``) or
            a value (mode ``value``: a reduction, a cardinality, an element read by index).
        mode: ``elements`` reads every element (and the error that ends them, if any);
            ``value`` records what ``build`` returns (or the error it raises);
            ``checkpoint_<variant>`` reads like ``elements`` on TF's side, and through saved
            and restored iterator states on feedline's (see :data:`CHECKPOINT_VARIANTS`).
        derive: Applied to the list of elements (NumPy) before recording, on both sides:
            for outputs only defined up to randomness (a shuffle's order), it keeps what is
            defined (the multiset, whether two epochs agree).
        tf_test: The TF test method the case ports (``Class.method``).
    """

    name: str
    build: Callable[[Any], Any]
    mode: str = "elements"
    derive: Callable[[list[Any]], Any] | None = None
    tf_test: str = ""


@dataclass
class Suite:
    """The cases of one module (a port of one TF test file) and what it leaves out."""

    tf_file: str
    cases: list[Case] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)

    def add(self, name: str, build: Callable[[Any], Any], mode: str = "elements",
            derive: Callable[[list[Any]], Any] | None = None, tf_test: str = "") -> None:
        """Add one case; names must be unique."""
        if any(c.name == name for c in self.cases):
            raise ValueError(f"{self.tf_file}: duplicate case name {name!r}")
        self.cases.append(Case(name, build, mode, derive, tf_test or name.split("[")[0]))

    def checkpoint(self, name: str, build: Callable[[Any], Any], tf_test: str = "",
                   derive: Callable[[list[Any]], Any] | None = None) -> None:
        """Add one case per checkpoint variant of TF's ``verify_fn`` combinations."""
        for variant in CHECKPOINT_VARIANTS:
            self.add(f"{name}[{variant}]", build, f"checkpoint_{variant}", derive,
                     tf_test or name)

    def skip(self, tf_test: str, reason: str) -> None:
        """Record a TF test left out, and why (the table in SKIPPED.md)."""
        self.skipped.append((tf_test, reason))


def params(**grid: Iterable[Any]) -> list[dict[str, Any]]:
    """Every combination of the given parameter values (``combinations.combine``).

    Example:
        >>> params(a=[1, 2], b=[True])
        [{'a': 1, 'b': True}, {'a': 2, 'b': True}]
    """
    out: list[dict[str, Any]] = [{}]
    for key, values in grid.items():
        out = [{**prefix, key: v} for prefix in out for v in values]
    return out


def label(p: dict[str, Any]) -> str:
    """A case-name suffix for a parameter combination.

    Example:
        >>> label({"count": 0, "drop": True})
        '[count=0,drop=True]'
    """
    return "[" + ",".join(f"{k}={v}" for k, v in p.items()) + "]"


# ----------------------------------------------------------------------------- encoding
def encode(value: Any) -> Any:
    """A JSON-safe, exact description of an element: structure, dtypes, shapes, values.

    Leaves become ``{"t": dtype, "s": shape, "v": values}``; ``bytes`` (and object arrays of
    them) have dtype ``bytes`` and their values as Latin-1 text. Python numbers count as
    the NumPy scalars they become (int64, float64, bool). Nested datasets (``window``) are
    ``{"dataset": [elements]}`` after :func:`to_numpy`.
    """
    if isinstance(value, dict):
        return {"dict": {str(k): encode(value[k]) for k in sorted(value)}}
    if isinstance(value, tuple):
        if hasattr(type(value), "_fields"):
            return {"namedtuple": type(value).__name__,
                    "fields": {f: encode(getattr(value, f)) for f in value._fields}}
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, _NestedDataset):
        return {"dataset": [encode(v) for v in value.elements]}
    if isinstance(value, list):
        return {"list": [encode(v) for v in value]}
    if value is None:
        return {"none": True}
    if isinstance(value, str):
        return {"str": value}
    if isinstance(value, bytes):
        return {"t": "bytes", "s": [], "v": value.decode("latin-1")}
    array = np.asarray(value)
    if array.dtype == object or array.dtype.kind in "SU":
        flat = [_text(v) for v in array.reshape(-1).tolist()]
        return {"t": "bytes", "s": list(array.shape), "v": _reshape(flat, array.shape)}
    return {"t": array.dtype.name, "s": list(array.shape), "v": _values(array)}


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("latin-1")
    if isinstance(v, str):  # a NumPy str array: marked so it never equals bytes
        return "<str>" + v
    return f"<{type(v).__name__}>{v!r}"


def _reshape(flat: list[Any], shape: tuple[int, ...]) -> Any:
    if not shape:
        return flat[0]
    step = len(flat) // shape[0] if shape[0] else 0
    return [_reshape(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _values(array: np.ndarray) -> Any:
    if array.dtype.kind == "f" or array.dtype.kind == "c":
        # repr of a float is exact; NaN and infinities as strings keep the JSON standard
        def exact(x: float) -> Any:
            return repr(float(x)) if math.isnan(x) or math.isinf(x) else float(x)
        if array.dtype.kind == "c":
            return _reshape([[exact(v.real), exact(v.imag)] for v in array.reshape(-1)],
                            array.shape)
        return _reshape([exact(v) for v in array.reshape(-1).tolist()], array.shape)
    return array.tolist()


class _NestedDataset:
    """The elements of a dataset found inside an element (window's outputs)."""

    def __init__(self, elements: list[Any]) -> None:
        self.elements = elements


def to_numpy(value: Any, is_dataset: Callable[[Any], bool],
             read: Callable[[Any], list[Any]]) -> Any:
    """Turn an element into NumPy leaves and nested datasets into their element lists."""
    if is_dataset(value):
        return _NestedDataset([to_numpy(v, is_dataset, read) for v in read(value)])
    if isinstance(value, dict):
        return {k: to_numpy(v, is_dataset, read) for k, v in value.items()}
    if isinstance(value, tuple):
        items = [to_numpy(v, is_dataset, read) for v in value]
        return type(value)(*items) if hasattr(type(value), "_fields") else tuple(items)
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        return value.numpy()
    return value


# ----------------------------------------------------------------------------- results
def canonical(result: Any) -> str:
    """The text two results are compared by (sorted keys, no whitespace variations)."""
    return json.dumps(result, sort_keys=True, separators=(",", ":"))


def derive_sorted(elements: list[Any]) -> list[Any]:
    """The elements in sorted order (a shuffle's multiset).

    Example:
        >>> derive_sorted([np.int64(2), np.int64(1)])
        [1, 2]
    """
    return sorted(_plain(e) for e in elements)


def _plain(element: Any) -> Any:
    """Plain Python values (lists, ints, floats, bytes) of an element, for sorting and sets."""
    if isinstance(element, dict):
        return tuple((k, _plain(element[k])) for k in sorted(element))
    if isinstance(element, tuple):
        return tuple(_plain(e) for e in element)
    if isinstance(element, bytes):
        return element.decode("latin-1")
    array = np.asarray(element)
    out = array.tolist()
    return _freeze(out)


def _freeze(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, bytes):
        return v.decode("latin-1")
    return v


def plain(element: Any) -> Any:
    """Public alias of the plain-value conversion used by ``derive`` functions."""
    return _plain(element)


def attempt(ns: Any, fn: Callable[[], Any]) -> Any:
    """``fn()``, or ``"error:<category>"`` if it raises (several reads in one value case).

    Example:
        >>> class Ns:
        ...     category = staticmethod(lambda e: "invalid")
        >>> attempt(Ns, lambda: 1), attempt(Ns, lambda: int("x"))
        (1, 'error:invalid')
    """
    try:
        return fn()
    except AssertionError:
        raise
    except Exception as error:  # noqa: BLE001 - the category is the result
        return "error:" + ns.category(error)


def restored_matches(elements: list[Any], uninterrupted: list[Any]) -> dict[str, Any]:
    """For checkpoint cases of random pipelines (a seeded shuffle): TF's checkpoint tests
    assert the restored run equals an uninterrupted one; the order itself is TF's RNG.

    Records that equality and the multiset.
    """
    same = [_plain(e) for e in elements] == [_plain(e) for e in uninterrupted]
    return {"restored_equals_uninterrupted": same, "sorted": derive_sorted(elements)}


restored_matches.needs_uninterrupted = True  # type: ignore[attr-defined]


def values(ns: Any, dataset: Any) -> list[Any]:
    """The elements of ``dataset`` as plain Python values (to compare runs in a value case)."""
    return [_plain(to_numpy(e, ns.is_dataset, ns.read_all)) for e in ns.read_all(dataset)]


def shuffle_summary(ns: Any, dataset: Any, expected: list[Any]) -> dict[str, Any]:
    """What TF's global-shuffle tests assert of a shuffled run whose order is TF's RNG: the
    multiset, that the order is not the input's, and that the length is the cardinality."""
    out = values(ns, dataset)
    return {"sorted": sorted(out), "shuffled": out != expected,
            "len_is_cardinality": len(out) == ns.cardinality(dataset)}


def derive_digest(elements: list[Any]) -> dict[str, Any]:
    """The count and a SHA-256 of the exact encoding of a long output (keeps the recording
    small; equality is still exact).

    Example:
        >>> derive_digest([np.int64(1)])["count"]
        1
    """
    import hashlib

    text = canonical([encode(e) for e in elements])
    return {"count": len(elements), "sha256": hashlib.sha256(text.encode()).hexdigest()}


_SCRATCH: list[str] = []


def scratch_dir() -> str:
    """A fresh temporary folder for a case's files, removed when the process exits."""
    import atexit
    import shutil
    import tempfile

    if not _SCRATCH:
        _SCRATCH.append(tempfile.mkdtemp(prefix="tfcases-"))
        atexit.register(shutil.rmtree, _SCRATCH[0], True)
    return tempfile.mkdtemp(dir=_SCRATCH[0])


def next_value(ns: Any, iterator: Any) -> Any:
    """The next element of ``iterator`` as a plain value, ``"end"``, or ``"error:<category>"``."""
    try:
        return _plain(to_numpy(next(iterator), ns.is_dataset, ns.read_all))
    except StopIteration:
        return "end"
    except AssertionError:
        raise
    except Exception as error:  # noqa: BLE001 - the category is the result
        return "error:" + ns.category(error)


def read_values(ns: Any, iterator: Any, n: int | None = None) -> list[Any]:
    """Up to ``n`` (all if ``None``) next values of ``iterator``, stopping after an end/error."""
    out: list[Any] = []
    while n is None or len(out) < n:
        value = next_value(ns, iterator)
        out.append(value)
        if isinstance(value, str) and (value == "end" or value.startswith("error:")):
            break
    return out


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as TFRecord framing uses it.

    Example:
        >>> hex(crc32c(b"123456789"))
        '0xe3069283'
    """
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data``."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord_bytes(records: list[bytes]) -> bytes:
    """The TFRecord file holding ``records`` (written here so neither side's writer is tested).

    Example:
        >>> len(tfrecord_bytes([b"ab"]))
        18
    """
    import struct

    out = bytearray()
    for record in records:
        length = struct.pack("<Q", len(record))
        out += length + struct.pack("<I", masked_crc(length))
        out += record + struct.pack("<I", masked_crc(record))
    return bytes(out)


def restored_matches_count(elements: list[Any], uninterrupted: list[Any]) -> dict[str, Any]:
    """Like :func:`restored_matches`, for random draws whose multiset is TF's RNG too (which
    dataset ``sample_from_datasets`` picks): the equality and the count."""
    same = [_plain(e) for e in elements] == [_plain(e) for e in uninterrupted]
    return {"restored_equals_uninterrupted": same, "count": len(elements)}


restored_matches_count.needs_uninterrupted = True  # type: ignore[attr-defined]
