"""The bridge to the optional C extension ``feedline.formats._example_fast``.

The extension walks the wire format of whole batches with the GIL released. It never raises
its own errors: on anything unusual it returns None and the protobuf path (:mod:`.decode`)
produces the result or the error. :data:`extension` is the loaded module, or ``None`` when it
was not compiled or ``FEEDLINE_PURE_PYTHON`` is set (tests swap it to compare the two paths).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from feedline.formats.example.decode import _dense_items
from feedline.formats.example.ragged import RaggedValues
from feedline.formats.example.specs import (
    _BYTES,
    _FLOAT32,
    _INT64,
    FixedLenFeature,
    VarLenFeature,
    _default_array,
    _pad_value,
)

extension: Any
try:
    from feedline.formats import _example_fast as extension
except ImportError:  # not compiled (optional): the protobuf path does all the work
    extension = None
if os.environ.get("FEEDLINE_PURE_PYTHON", "") not in ("", "0"):
    extension = None

_NATIVE_KIND = {_BYTES: 1, _FLOAT32: 2, _INT64: 3}  # field numbers of the Feature oneof


@functools.lru_cache(maxsize=1024)
def _native_spec(name: str, spec: Any) -> tuple[bytes, int, int, bool]:
    """``(name, kind, size or -1 for any count, allow_missing)`` for _example_fast."""
    if isinstance(spec, FixedLenFeature):
        size, allow_missing = math.prod(spec.shape), spec.default_value is not None
    else:
        size, allow_missing = -1, True
    return name.encode(), _NATIVE_KIND[spec.dtype], size, allow_missing


def _native_batch(serialized: Any) -> list[Any] | None:
    """The batch as a list for the C parser, which checks every record is bytes itself."""
    if type(serialized) is list:
        return serialized
    if type(serialized) is tuple:
        return list(serialized)
    if isinstance(serialized, np.ndarray) and serialized.ndim == 1:
        return serialized.tolist()
    return None  # _records() converts (or rejects) anything else


def _parse_native(records: list[Any], features: Mapping[str, Any]) -> dict[str, Any] | None:
    """The C parser's result, or None where the protobuf path must decide (or raise)."""
    try:
        # Specs hash by identity, so the cache costs one lookup per feature.
        plan = tuple(_native_spec(name, spec) for name, spec in features.items())
    except UnicodeEncodeError:  # a name with lone surrogates: as protobuf's map decides
        return None
    results = extension.parse_examples(records, plan)
    if results is None:
        return None
    batch = len(records)
    out: dict[str, Any] = {}
    for (name, spec), (values, aux) in zip(features.items(), results):
        if spec.dtype == _BYTES:
            flat = np.empty(len(values), dtype=object)
            flat[:] = values
        else:
            flat = np.frombuffer(values, dtype=spec.dtype)
        if isinstance(spec, FixedLenFeature):
            out[name] = flat.reshape(batch, *spec.shape)
            if aux:  # indices of the records without the feature
                out[name][aux] = _default_array(spec)
            continue
        splits = np.frombuffer(aux, dtype=np.int64)
        if isinstance(spec, VarLenFeature):
            out[name] = RaggedValues(flat, splits)
            continue
        size = math.prod(spec.shape)
        lengths = np.diff(splits)
        if lengths.any() if size == 0 else (lengths % size).any():
            return None  # _parse_sequence_in_example names the record
        counts = lengths // size if size else lengths
        out[name] = _dense_items(flat, counts, spec.shape, _pad_value(spec, spec.dtype),
                                 spec.dtype)
    return out
