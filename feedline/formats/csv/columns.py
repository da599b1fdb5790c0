"""Column specs (``record_defaults``) and the parsers of field text into typed values."""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np

from feedline.core.validation import as_int

_REQUIRED = None  # the default of a column that must be present
_STRING = np.dtype(object)
_NUMERIC = tuple(np.dtype(t) for t in (np.int32, np.int64, np.float32, np.float64))
# tf.data parses integers with safe_strto32/64: optional spaces, an optional '-', digits.
_INTEGER = re.compile(r"\s*-?[0-9]+\s*\Z", re.ASCII)


def _type_name(dtype: np.dtype) -> str:
    return "string" if dtype == _STRING else dtype.name


def _column_dtype(spec: Any, where: str) -> np.dtype:
    if spec is int or spec is float or spec is bool:  # (np.dtype("int64") == int is True)
        raise TypeError(f"{where}: the Python type {spec.__name__} is ambiguous; use "
                        "np.int32, np.int64, np.float32, np.float64 or bytes")
    try:
        dtype = np.dtype(spec)
    except TypeError:
        raise TypeError(f"{where}: expected a dtype or a default value; found {spec!r}") \
            from None
    if dtype.kind in "SUO":
        return _STRING
    if dtype not in _NUMERIC:
        raise TypeError(f"{where}: CSV columns are int32, int64, float32, float64 or string; "
                        f"found {dtype.name}")
    return dtype


def _column(spec: Any, index: int) -> tuple[np.dtype, Any]:
    """``(dtype, default)`` of a ``record_defaults`` entry; default ``_REQUIRED`` if none.

    As in tf.data: a dtype means a required column; a value is the default, with Python
    ``int`` as int32 (int64 when it does not fit), ``float`` as float32, ``str``/``bytes`` as
    a string; a one-element list or array holds the default, an empty one a required column.
    """
    where = f"CsvDataset: record_defaults[{index}]"
    if isinstance(spec, type | np.dtype):
        return _column_dtype(spec, where), _REQUIRED
    if isinstance(spec, list | tuple):
        if len(spec) > 1:
            raise ValueError(f"{where}: there should be only one default per column; found "
                             f"{len(spec)}")
        # tf.constant([]) is an empty float32 tensor: a required float32 column.
        return _column(spec[0], index) if spec else (np.dtype(np.float32), _REQUIRED)
    if isinstance(spec, np.ndarray):
        if spec.ndim > 1 or spec.size > 1:
            raise ValueError(f"{where}: a default must be a scalar or have at most one "
                             f"element; found shape {spec.shape}")
        dtype = _column_dtype(spec.dtype, where)
        if spec.size == 0:
            return dtype, _REQUIRED
        spec = spec.reshape(()).item() if dtype == _STRING else spec.reshape(())[()]
    if isinstance(spec, str | np.str_):
        return _STRING, str(spec).encode()
    if isinstance(spec, bytes | np.bytes_):
        return _STRING, bytes(spec)
    if isinstance(spec, bool | np.bool_):
        raise TypeError(f"{where}: bool columns are not supported by CSV (found {spec!r})")
    if isinstance(spec, np.generic):
        dtype = _column_dtype(spec.dtype, where)
        return dtype, dtype.type(spec)
    if isinstance(spec, int):
        dtype = np.dtype(np.int32) if -2**31 <= spec < 2**31 else np.dtype(np.int64)
        return dtype, dtype.type(spec)
    if isinstance(spec, float):
        return np.dtype(np.float32), np.float32(spec)
    raise TypeError(f"{where}: expected a dtype or a default value (int, float, str, bytes, "
                    f"NumPy scalar); found {type(spec).__name__}")


# Finite doubles at least this large round to infinity as float32 (FLT_MAX + half an ulp).
_FLOAT32_OVERFLOW = 3.4028235677973366e38


def _parser(dtype: np.dtype) -> Any:
    """``text -> value`` for one column type; raises ValueError when the text is not one."""
    if dtype == _STRING:
        return lambda text: text.encode("latin-1")
    scalar = dtype.type
    if dtype.kind == "i":
        info = np.iinfo(dtype)
        low, high, match = info.min, info.max, _INTEGER.match

        def parse_int(text: str) -> Any:
            if not match(text):
                raise ValueError
            value = int(text)
            if not low <= value <= high:
                raise ValueError
            return scalar(value)

        return parse_int

    def parse_float(text: str) -> Any:
        if "_" in text:  # Python's float() accepts "1_000"; tf.data does not
            raise ValueError
        value = float(text)
        if scalar is np.float32 and abs(value) >= _FLOAT32_OVERFLOW:  # (False for NaN)
            return scalar(np.inf if value > 0 else -np.inf)  # as tf.data, without a warning
        return scalar(value)

    return parse_float


def _single_byte(value: Any, name: str) -> str:
    raw = value.encode() if isinstance(value, str) else value
    if not isinstance(raw, bytes) or len(raw) != 1:
        raise ValueError(f"CsvDataset: {name} must be a single one-byte character; "
                         f"found {value!r}")
    return raw.decode("latin-1")


def _indices(values: Any, name: str) -> tuple[int, ...] | None:
    if values is None:
        return None
    items = values.reshape(-1).tolist() if isinstance(values, np.ndarray) else list(values)
    # One by one: np.asarray(..., dtype=np.int64) would silently truncate 1.5 and accept True.
    out = tuple(as_int(v, f"CsvDataset({name}[{i}])") for i, v in enumerate(items))
    if any(v < 0 for v in out):
        raise ValueError(f"CsvDataset: {name} must be non-negative column indices; found {out}")
    if any(a >= b for a, b in itertools.pairwise(out)):
        raise ValueError(f"CsvDataset: {name} must be strictly increasing; found {out}")
    return out


def _show(field: str) -> str:
    return repr(field.encode("latin-1").decode("utf-8", "replace"))
