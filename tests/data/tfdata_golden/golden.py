"""Read the golden files ``record.py`` wrote with TensorFlow, as feedline values.

Encoding (``record.enc``): ``{"array": {"dtype", "shape", "values" | "hex"}}`` for a tensor
(``"hex"`` for strings, as bytes), ``{"ragged": {"flat_values", "nested_row_splits"}}`` for a
``tf.RaggedTensor`` (:class:`feedline.RaggedValues`), ``{"sparse": {"indices", "values",
"dense_shape"}}`` for a ``tf.SparseTensor`` (:class:`feedline.SparseValues`), ``{"tuple":
[...]}`` and ``{"dict": {...}}`` for nests. Scalars decode as NumPy scalars, strings as
``bytes``, as feedline's elements are.

Tests import this module by path (``tests/data`` is no package); it needs no TensorFlow.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent


def load(name: str) -> dict[str, Any]:
    """The JSON of ``<name>.json`` (undecoded: cases hold their inputs and outputs).

    Example:
        >>> sorted(load("counter"))[:2]
        ['default', 'float32_accumulates']
    """
    return json.loads((HERE / f"{name}.json").read_text())


def array(value: dict[str, Any]) -> np.ndarray:
    """An ``{"array": ...}`` payload's array (0-d arrays stay arrays).

    Example:
        >>> array({"dtype": "int32", "shape": [2], "values": [1, 2]})
        array([1, 2], dtype=int32)
    """
    shape = tuple(value["shape"])
    if value["dtype"] == "bytes":
        out = np.empty(len(value["hex"]), dtype=object)
        out[:] = [bytes.fromhex(h) for h in value["hex"]]
        return out.reshape(shape)
    return np.array(value["values"], dtype=value["dtype"]).reshape(shape)


def decode(value: Any) -> Any:
    """A golden value as a feedline value (scalars as NumPy scalars or ``bytes``).

    Example:
        >>> decode({"tuple": [{"array": {"dtype": "int64", "shape": [], "values": [3]}},
        ...                   {"array": {"dtype": "bytes", "shape": [], "hex": ["6869"]}}]})
        (np.int64(3), b'hi')
    """
    from feedline import RaggedValues, SparseValues

    if "tuple" in value:
        return tuple(decode(v) for v in value["tuple"])
    if "dict" in value:
        return {k: decode(v) for k, v in value["dict"].items()}
    if "ragged" in value:
        ragged = value["ragged"]
        return RaggedValues(array(ragged["flat_values"]["array"]),
                            [array(s["array"]) for s in ragged["nested_row_splits"]])
    if "sparse" in value:
        sparse = value["sparse"]
        return SparseValues(array(sparse["indices"]["array"]), array(sparse["values"]["array"]),
                            array(sparse["dense_shape"]["array"]))
    out = array(value["array"])
    return out[()] if out.ndim == 0 else out


def spec(value: Any) -> Any:
    """A recorded ``output_signature`` as feedline :class:`~feedline.TensorSpec` s (a ragged
    spec is kept as the string ``"ragged"``: feedline has no spec for ragged leaves).

    Example:
        >>> spec({"tensor": {"shape": [None, 3], "dtype": "float32"}})
        TensorSpec(shape=(None, 3), dtype=float32)
    """
    from feedline import TensorSpec

    if "tuple" in value:
        return tuple(spec(v) for v in value["tuple"])
    if "dict" in value:
        return {k: spec(v) for k, v in value["dict"].items()}
    if "ragged" in value:
        return "ragged"
    leaf = value["tensor"]
    dtype = np.dtype(object) if leaf["dtype"] == "bytes" else np.dtype(leaf["dtype"])
    return TensorSpec(tuple(leaf["shape"]), dtype)


def same(actual: Any, expected: Any, where: str = "") -> None:
    """Assert ``actual`` equals ``expected`` exactly: structure, dtypes (row splits: values
    only, feedline's are always int64), shapes and values.

    Example:
        >>> same((np.int64(1), b"x"), (np.int64(1), b"x"))
    """
    from feedline import RaggedValues, SparseValues

    at = where or "the top"
    if isinstance(expected, list):  # a list of elements
        assert isinstance(actual, list), f"at {at}: expected a list, got {actual!r}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            same(a, e, f"{where} element {i}: ")
        assert len(actual) == len(expected), \
            f"at {at}: {len(actual)} elements, expected {len(expected)}"
        return
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected), \
            f"at {at}: expected a tuple of {len(expected)}, got {actual!r}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            same(a, e, f"{where}[{i}]")
        return
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected), \
            f"at {at}: expected keys {sorted(expected)}, got {actual!r}"
        for key in expected:
            same(actual[key], expected[key], f"{where}[{key!r}]")
        return
    if isinstance(expected, RaggedValues):
        assert isinstance(actual, RaggedValues), f"at {at}: expected ragged, got {actual!r}"
        assert actual.ragged_rank == expected.ragged_rank, \
            f"at {at}: ragged rank {actual.ragged_rank}, expected {expected.ragged_rank}"
        for level, (a, e) in enumerate(zip(actual.nested_row_splits, expected.nested_row_splits)):
            assert a.tolist() == e.tolist(), f"at {at}: row splits {level} {a}, expected {e}"
        same(actual.values, expected.values, f"{where}.values")
        return
    if isinstance(expected, SparseValues):
        assert isinstance(actual, SparseValues), f"at {at}: expected sparse, got {actual!r}"
        same(actual.indices, expected.indices, f"{where}.indices")
        same(actual.values, expected.values, f"{where}.values")
        same(actual.dense_shape, expected.dense_shape, f"{where}.dense_shape")
        return
    if isinstance(expected, bytes):
        assert actual == expected, f"at {at}: {actual!r}, expected {expected!r}"
        return
    a, e = np.asarray(actual), np.asarray(expected)
    assert a.shape == e.shape, f"at {at}: shape {a.shape}, expected {e.shape}"
    assert a.dtype == e.dtype, f"at {at}: dtype {a.dtype}, expected {e.dtype}"
    assert a.tolist() == e.tolist(), f"at {at}: {a.tolist()}, expected {e.tolist()}"
