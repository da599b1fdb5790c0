"""The public parsing functions (``parse_example``, ``parse_single_example``, SequenceExamples).

Specs holding ``RaggedFeature``/``SparseFeature`` entries are parsed through a
:class:`~feedline.formats.example.composite.CompositePlan`: their keys as var-len features,
then assembled.

Each takes the C fast path (:mod:`.cbridge`) when the extension is there and the batch is a
plain list of ``bytes``, and the protobuf path (:mod:`.decode`) otherwise or when the C code
steps aside.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from feedline.formats.example import cbridge
from feedline.formats.example.composite import plan_composites, var_len_as_sparse
from feedline.formats.example.decode import (
    _FEATURE_MAP,
    _batch_where,
    _decode,
    _parse_features,
    _parse_sequences,
    _records,
    _single_where,
)
from feedline.formats.example.ragged import RaggedValues
from feedline.formats.example.sparse import SparseValues  # noqa: F401 (doctests)
from feedline.formats.example.specs import (
    FixedLenFeature,
    FixedLenSequenceFeature,
    RaggedFeature,
    SparseFeature,
    VarLenFeature,
    _check_features,
)


_EXAMPLE_SPECS = (FixedLenFeature, VarLenFeature, FixedLenSequenceFeature, RaggedFeature,
                  SparseFeature)


def parse_example(serialized: Any, features: Mapping[str, Any], *,
                  var_len_as_sparse: bool = False) -> dict[str, Any]:
    """Parse a batch of serialized tf.train.Example protos (``tf.io.parse_example``).

    Args:
        serialized: A list or 1-D object array of ``bytes`` (e.g. a batch of TFRecord records).
        features: ``{name: FixedLenFeature | VarLenFeature | FixedLenSequenceFeature |
            RaggedFeature | SparseFeature}``.
        var_len_as_sparse: Return ``VarLenFeature`` values as :class:`SparseValues`
            (TensorFlow's ``SparseTensor``: indices ``[record, position]``, dense shape
            ``[batch, longest]``) instead of :class:`RaggedValues`.

    Returns:
        ``{name: value}``: ``FixedLenFeature`` -> array ``[batch, *shape]``;
        ``VarLenFeature`` -> :class:`RaggedValues` with one row per record;
        ``FixedLenSequenceFeature`` -> array ``[batch, longest, *shape]`` padded with its
        ``default_value``; ``RaggedFeature`` -> :class:`RaggedValues` with one row per record
        (and a level per partition); ``SparseFeature`` -> :class:`SparseValues` of shape
        ``[batch, *size]``.

    Raises:
        ExampleParseError: a record is not an Example, or a feature is missing without a
            default, has the wrong type or the wrong number of values, or a composite
            feature's parts do not fit together (the message names the feature, the
            expectation, what was found and the record's index in the batch).
        ValueError: two specs read one key with different types, or as dense and var-len.

    Example:
        >>> from feedline.formats.example import encode_example
        >>> batch = [encode_example({"id": 1, "tokens": [4, 5]}), encode_example({"id": 2})]
        >>> out = parse_example(batch, {"id": FixedLenFeature([], "int64"),
        ...                             "tokens": VarLenFeature("int64")})
        >>> out["id"], out["tokens"].to_list(), out["tokens"].to_padded(0).tolist()
        (array([1, 2]), [[4, 5], []], [[4, 5], [0, 0]])
        >>> words = [encode_example({"w": [7, 8, 9], "lens": [2, 1]}),
        ...          encode_example({"w": [6], "lens": [0, 1]})]
        >>> parse_example(words, {"w": RaggedFeature(
        ...     "int64", partitions=[RaggedFeature.RowLengths("lens")])})["w"].to_list()
        [[[7, 8], [9]], [[], [6]]]
    """
    _check_features(features, _EXAMPLE_SPECS, "features", "parse_example")
    plan = plan_composites(features, "parse_example")
    parsed = _parse_batch(serialized, features if plan is None else plan.merged)
    if plan is not None:
        parsed = plan.build(parsed, _batch_where, single=False)
    return _var_len_as_sparse(parsed, features) if var_len_as_sparse else parsed


def _parse_batch(serialized: Any, features: Mapping[str, Any]) -> dict[str, Any]:
    batch = cbridge._native_batch(serialized) if cbridge.extension is not None else None
    if batch is not None:
        out = cbridge._parse_native(batch, features)
        if out is not None:
            return out
    records = _records(serialized, "parse_example")
    examples = _decode(records, False, _batch_where)
    maps = list(map(_FEATURE_MAP, examples))
    return _parse_features(maps, features, _batch_where)


def parse_single_example(serialized: bytes, features: Mapping[str, Any], *,
                         var_len_as_sparse: bool = False) -> dict[str, Any]:
    """Parse one serialized tf.train.Example (``tf.io.parse_single_example``).

    Outputs are those of :func:`parse_example` without the batch dimension: a
    ``VarLenFeature`` gives the 1-D array of the record's values (with
    ``var_len_as_sparse=True``: TensorFlow's :class:`SparseValues`, indices ``[[0], [1],
    ...]``); a ``RaggedFeature`` a 1-D array without partitions, else :class:`RaggedValues`;
    a ``SparseFeature`` :class:`SparseValues` of shape ``size``.

    Example:
        >>> from feedline.formats.example import encode_example
        >>> record = encode_example({"w": [0.5, 1.5], "name": "x"})
        >>> parse_single_example(record, {"w": FixedLenFeature([2], "float32"),
        ...                               "name": FixedLenFeature([], "string")})
        {'w': array([0.5, 1.5], dtype=float32), 'name': b'x'}
        >>> record = encode_example({"at": [3, 0], "weight": [0.5, 2.0]})
        >>> parse_single_example(record, {"w": SparseFeature("at", "weight", "float32", 4)})
        {'w': SparseValues(indices=[[0], [3]], values=[2.0, 0.5], dense_shape=[4])}
    """
    _check_features(features, _EXAMPLE_SPECS, "features", "parse_single_example")
    record = _single_record(serialized, "parse_single_example")
    plan = plan_composites(features, "parse_single_example")
    specs = features if plan is None else plan.merged
    parsed = cbridge._parse_native([record], specs) if cbridge.extension is not None else None
    if parsed is None:
        examples = _decode([record], False, _single_where)
        parsed = _parse_features([examples[0].features.feature], specs, _single_where)
    if plan is None:
        out = {name: _unbatch(value) for name, value in parsed.items()}
    else:
        built = plan.build(parsed, _single_where, single=True)
        out = {name: value if name in plan.composites else _unbatch(value)
               for name, value in built.items()}
    return _var_len_as_sparse(out, features) if var_len_as_sparse else out


def _var_len_as_sparse(parsed: dict[str, Any], features: Mapping[str, Any]) -> dict[str, Any]:
    return {name: var_len_as_sparse(value) if isinstance(features[name], VarLenFeature)
            else value for name, value in parsed.items()}


def _single_record(serialized: Any, function: str) -> bytes:
    if isinstance(serialized, np.ndarray) and serialized.ndim == 0:
        serialized = serialized.item()
    if isinstance(serialized, bytearray | memoryview):
        serialized = bytes(serialized)
    if not isinstance(serialized, bytes):
        raise TypeError(f"{function}() needs one serialized record (bytes); found "
                        f"{type(serialized).__name__}")
    return serialized


def _unbatch(value: Any) -> Any:
    if isinstance(value, RaggedValues):
        row = value[0]
        return row
    return value[0]


def parse_sequence_example(serialized: Any, context_features: Mapping[str, Any] | None = None,
                           sequence_features: Mapping[str, Any] | None = None
                           ) -> tuple[dict[str, Any], dict[str, Any], dict[str, np.ndarray]]:
    """Parse a batch of serialized tf.train.SequenceExample protos.

    Args:
        serialized: A list or 1-D object array of ``bytes``.
        context_features: ``{name: FixedLenFeature | VarLenFeature}`` for the context.
        sequence_features: ``{name: FixedLenSequenceFeature | VarLenFeature}`` for the
            feature lists.

    Returns:
        ``(context, feature_lists, feature_list_lengths)`` as ``tf.io.parse_sequence_example``:
        context values as in :func:`parse_example`; a ``FixedLenSequenceFeature`` gives an
        array ``[batch, longest, *shape]`` padded with zeros (``b""``) and its number of steps
        per record in ``feature_list_lengths``; a ``VarLenFeature`` gives
        :class:`RaggedValues` with two levels (records, then steps).

    Example:
        >>> from feedline.formats.example import encode_sequence_example
        >>> batch = [encode_sequence_example({"n": 2}, {"x": [[1], [2]]}),
        ...          encode_sequence_example({"n": 1}, {"x": [[3]]})]
        >>> context, lists, lengths = parse_sequence_example(
        ...     batch, {"n": FixedLenFeature([], "int64")},
        ...     {"x": FixedLenSequenceFeature([], "int64")})
        >>> context["n"], lists["x"], lengths["x"]
        (array([2, 1]), array([[1, 2],
               [3, 0]]), array([2, 1]))
    """
    records = _records(serialized, "parse_sequence_example")
    return _parse_sequences(records, context_features, sequence_features, _batch_where,
                            "parse_sequence_example")


def parse_single_sequence_example(
        serialized: bytes, context_features: Mapping[str, Any] | None = None,
        sequence_features: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Parse one serialized tf.train.SequenceExample.

    Returns:
        ``(context, feature_lists)`` as ``tf.io.parse_single_sequence_example``: a
        ``FixedLenSequenceFeature`` gives ``[steps, *shape]``; a ``VarLenFeature`` in the
        feature lists gives :class:`RaggedValues` with one row per step; a context
        ``VarLenFeature`` gives a 1-D array.

    Example:
        >>> from feedline.formats.example import encode_sequence_example
        >>> record = encode_sequence_example({"len": 2}, {"frames": [[0.0, 0.5], [1.0, 1.5]]})
        >>> context, lists = parse_single_sequence_example(
        ...     record, {"len": FixedLenFeature([], "int64")},
        ...     {"frames": FixedLenSequenceFeature([2], "float32")})
        >>> int(context["len"]), lists["frames"].tolist()
        (2, [[0.0, 0.5], [1.0, 1.5]])
    """
    record = _single_record(serialized, "parse_single_sequence_example")
    context, lists, _ = _parse_sequences([record], context_features, sequence_features,
                                         _single_where, "parse_single_sequence_example")
    return ({name: _unbatch(value) for name, value in context.items()},
            {name: _unbatch(value) for name, value in lists.items()})
