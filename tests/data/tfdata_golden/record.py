"""Record what TensorFlow 2.21's tf.data and tf.io return for small inputs, as JSON.

Run with the TensorFlow interpreter (never by the tests, which need no TensorFlow)::

    benchmarks/.venvs/tf/bin/python tests/data/tfdata_golden/record.py

It writes one ``<operation>.json`` beside itself per operation (all of them, or those named
as arguments: ``record.py counter cardinality``), and ``cardinality.json``. Every case holds its input
(the elements, or the serialized protos as hex) and TensorFlow's output, encoded as
described in :mod:`golden` (which decodes them into feedline values). The functions a case
applies (``key_func``, ``reduce_func``, ...) cannot be stored: each case has a name, and the
tests define the same functions under that name (``CASES`` dicts in the test modules).

``rejection_resample`` is random: its file holds, per case, the per-class output counts of
``RUNS`` runs with seeds ``0 .. RUNS - 1`` (the distribution a test compares feedline's
against), the exact output where the result is not random (target equal to the initial
distribution), and the structure of an element.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
RUNS = 40
"""Seeded runs per rejection_resample case."""


def enc(value: Any) -> Any:
    """A TensorFlow value (tensor, ragged, sparse, nest of them) as JSON (see golden.py)."""
    import tensorflow as tf

    if isinstance(value, tf.RaggedTensor):
        return {"ragged": {"flat_values": enc(value.flat_values),
                           "nested_row_splits": [enc(s) for s in value.nested_row_splits]}}
    if isinstance(value, tf.SparseTensor):
        return {"sparse": {"indices": enc(value.indices), "values": enc(value.values),
                           "dense_shape": enc(value.dense_shape)}}
    if isinstance(value, tuple):
        return {"tuple": [enc(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": {k: enc(v) for k, v in value.items()}}
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    if array.dtype == object or array.dtype.kind == "S":
        return {"array": {"dtype": "bytes", "shape": list(array.shape),
                          "hex": [bytes(x).hex() for x in array.ravel().tolist()]}}
    return {"array": {"dtype": array.dtype.name, "shape": list(array.shape),
                      "values": array.ravel().tolist()}}


def listed(dataset: Any) -> list[Any]:
    return [enc(element) for element in dataset]


def spec_json(spec: Any) -> Any:
    """A TensorSpec / RaggedTensorSpec nest as JSON, for the tests to rebuild."""
    import tensorflow as tf

    if isinstance(spec, tuple):
        return {"tuple": [spec_json(s) for s in spec]}
    if isinstance(spec, dict):
        return {"dict": {k: spec_json(s) for k, s in spec.items()}}
    kind = "ragged" if isinstance(spec, tf.RaggedTensorSpec) else "tensor"
    dtype = "bytes" if spec.dtype == tf.string else spec.dtype.name
    return {kind: {"shape": spec.shape.as_list(), "dtype": dtype}}


def generator_dataset(elements: list[Any], signature: Any) -> Any:
    """``from_generator`` over ``elements``: the static shapes (None dims) are the signature's."""
    import tensorflow as tf

    def gen():
        yield from elements

    return tf.data.Dataset.from_generator(gen, output_signature=signature)


def write(name: str, payload: Any) -> None:
    path = HERE / f"{name}.json"
    path.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path.relative_to(HERE.parents[2])}")


# ----------------------------------------------------------------------------- group_by_window
def record_group_by_window() -> None:
    import tensorflow as tf

    cases: dict[str, Any] = {}

    def case(name: str, dataset: Any) -> None:
        cases[name] = {"output": listed(dataset), "cardinality": int(dataset.cardinality())}

    r13 = tf.data.Dataset.range(13)
    # Leftover groups are flushed at the end in key order, not in order of appearance.
    case("mod5_window4", r13.group_by_window(
        lambda x: (x * 7) % 5, lambda key, window: window.batch(4), window_size=4))
    case("window_size_func", tf.data.Dataset.range(20).group_by_window(
        lambda x: x % 3, lambda key, window: window.batch(10),
        window_size_func=lambda key: key + 2))
    case("negative_keys", r13.group_by_window(
        lambda x: 2 - x % 4 * 3, lambda key, window: window.batch(5), window_size=2))
    case("reduce_uses_key", r13.group_by_window(
        lambda x: x % 2, lambda key, window: window.map(lambda x: x * 100 + key), window_size=3))
    case("several_outputs_per_window", tf.data.Dataset.range(17).group_by_window(
        lambda x: x % 2, lambda key, window: window.batch(2), window_size=5))
    case("empty_reduce", r13.group_by_window(
        lambda x: x % 3, lambda key, window: window.filter(lambda x: x % 2 == 0).batch(9),
        window_size=3))
    pairs = tf.data.Dataset.from_tensor_slices((np.arange(10), np.arange(10) * 2.5))
    case("tuple_elements", pairs.group_by_window(
        lambda a, b: a % 3, lambda key, window: window.batch(2), window_size=2))
    dicts = tf.data.Dataset.from_tensor_slices({"id": np.arange(7), "name": [
        b"a", b"bb", b"c", b"dd", b"e", b"ff", b"g"]})
    case("dict_elements", dicts.group_by_window(
        lambda d: tf.cast(tf.strings.length(d["name"]), tf.int64),
        lambda key, window: window.batch(3), window_size=3))
    case("window_size_1", tf.data.Dataset.range(5).group_by_window(
        lambda x: x % 2, lambda key, window: window.batch(3), window_size=1))
    case("empty_input", tf.data.Dataset.range(0).group_by_window(
        lambda x: x, lambda key, window: window.batch(2), window_size=2))
    write("group_by_window", cases)


# ----------------------------------------------------------------- bucket_by_sequence_length
SEQUENCES = [[0], [1, 2, 3, 4], [5, 6, 7], [7, 8, 9, 10, 11], [13, 14, 15, 16, 19, 20],
             [21, 22], [30], [31, 32, 33], [40, 41, 42, 43, 44, 45, 46], [], [50, 51]]


def record_bucket_by_sequence_length() -> None:
    import tensorflow as tf

    seq_signature = tf.TensorSpec([None], tf.int64)
    sequences = [np.array(s, np.int64) for s in SEQUENCES]
    cases: dict[str, Any] = {}

    def case(name: str, elements: list[Any], signature: Any, **kwargs: Any) -> None:
        length = kwargs.pop("element_length_func")
        dataset = generator_dataset(elements, signature).bucket_by_sequence_length(
            length, **kwargs)
        cases[name] = {"input": [enc(e) for e in elements], "signature": spec_json(signature),
                       "output": listed(dataset)}

    def seq_len(x: Any) -> Any:
        return tf.shape(x)[0]

    case("docstring", sequences[:6], seq_signature, element_length_func=seq_len,
         bucket_boundaries=[3, 5], bucket_batch_sizes=[2, 2, 2])
    case("three_buckets", sequences, seq_signature, element_length_func=seq_len,
         bucket_boundaries=[2, 4, 6], bucket_batch_sizes=[3, 2, 2, 1])
    case("pad_to_bucket_boundary", sequences[:8] + sequences[9:], seq_signature,
         element_length_func=seq_len, bucket_boundaries=[3, 5, 8],
         bucket_batch_sizes=[2, 2, 3, 1], pad_to_bucket_boundary=True)
    case("drop_remainder", sequences, seq_signature, element_length_func=seq_len,
         bucket_boundaries=[3, 5], bucket_batch_sizes=[2, 2, 2], drop_remainder=True)
    case("padded_shapes_and_values", sequences, seq_signature, element_length_func=seq_len,
         bucket_boundaries=[4], bucket_batch_sizes=[3, 2], padded_shapes=[8],
         padding_values=np.int64(-1))
    pairs = [(s, np.int64(i)) for i, s in enumerate(sequences)]
    pair_signature = (seq_signature, tf.TensorSpec([], tf.int64))
    case("tuple_elements", pairs, pair_signature,
         element_length_func=lambda s, label: tf.shape(s)[0], bucket_boundaries=[3, 5],
         bucket_batch_sizes=[2, 3, 2], padding_values=(np.int64(-7), np.int64(0)))
    case("tuple_pad_to_boundary", [p for p in pairs if len(p[0]) < 6], pair_signature,
         element_length_func=lambda s, label: tf.shape(s)[0], bucket_boundaries=[3, 6],
         bucket_batch_sizes=[2, 2, 2], pad_to_bucket_boundary=True)
    frames = [np.arange(n * 2, dtype=np.float32).reshape(n, 2) + n for n in (1, 4, 2, 5, 3, 1, 6)]
    case("frames_pad_to_boundary", frames, tf.TensorSpec([None, 2], tf.float32),
         element_length_func=seq_len, bucket_boundaries=[3, 7], bucket_batch_sizes=[2, 2, 2],
         pad_to_bucket_boundary=True)
    same = [{"len": np.int64(n), "x": np.full(3, n, np.int32)} for n in (1, 5, 2, 6, 1, 7, 3)]
    case("no_padding", same, {"len": tf.TensorSpec([], tf.int64),
                              "x": tf.TensorSpec([3], tf.int32)},
         element_length_func=lambda d: tf.cast(d["len"], tf.int32), bucket_boundaries=[4],
         bucket_batch_sizes=[2, 2], no_padding=True)
    words = [np.array(w, dtype=object) for w in
             ([b"a"], [b"b", b"c"], [b"d", b"e", b"f"], [b"g"], [b"h", b"i"])]
    case("bytes", words, tf.TensorSpec([None], tf.string), element_length_func=seq_len,
         bucket_boundaries=[2], bucket_batch_sizes=[2, 2], padding_values=b"<pad>")
    write("bucket_by_sequence_length", cases)


# ------------------------------------------------------------------------ rejection_resample
def resample_input(n: int, probs: list[float], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).choice(len(probs), size=n, p=probs).astype(np.int64)


RESAMPLE_CASES = {
    # name: (input size, input class probabilities, target_dist, initial_dist given?)
    "mixing_given_initial": (2000, [0.6, 0.3, 0.1], [1 / 3, 1 / 3, 1 / 3], True),
    "mixing_estimated_initial": (2000, [0.6, 0.3, 0.1], [1 / 3, 1 / 3, 1 / 3], False),
    "skewed_target": (2000, [0.5, 0.25, 0.25], [0.2, 0.3, 0.5], True),
    "zero_target_class": (2000, [0.5, 0.3, 0.2], [0.5, 0.5, 0.0], True),
    "zero_target_estimated": (1000, [0.5, 0.3, 0.2], [0.0, 0.5, 0.5], False),
}


def record_rejection_resample() -> None:
    import tensorflow as tf

    cases: dict[str, Any] = {}
    for name, (n, probs, target, given) in RESAMPLE_CASES.items():
        classes = resample_input(n, probs, seed=len(name))
        initial = np.bincount(classes, minlength=len(probs)) / n if given else None
        counts, lengths, firsts = [], [], []
        for seed in range(RUNS):
            dataset = tf.data.Dataset.from_tensor_slices(classes).rejection_resample(
                lambda x: x, target_dist=target,
                initial_dist=None if initial is None else initial.tolist(), seed=seed)
            out = list(dataset.as_numpy_iterator())
            labels = np.array([c for c, _ in out], np.int64)
            assert all(c == x for c, x in out)
            counts.append(np.bincount(labels, minlength=len(probs)).tolist())
            lengths.append(len(out))
            if seed == 0:
                firsts = [enc(tf.nest.map_structure(tf.constant, e)) for e in out[:3]]
        cases[name] = {"input": enc(classes), "target_dist": target,
                       "initial_dist": None if initial is None else initial.tolist(),
                       "counts": counts, "lengths": lengths, "first_elements_seed0": firsts}
    # Target equal to the given initial distribution: no resampling, every element once.
    classes = resample_input(50, [0.5, 0.5], seed=3)
    features = np.arange(50, dtype=np.float32) / 4
    initial = (np.bincount(classes, minlength=2) / 50).tolist()
    exact = tf.data.Dataset.from_tensor_slices((classes, features)).rejection_resample(
        lambda c, f: c, target_dist=initial, initial_dist=initial, seed=1)
    cases["target_equals_initial"] = {"input": enc((classes, features)), "target_dist": initial,
                                      "initial_dist": initial, "output": listed(exact)}
    cases["runs"] = RUNS
    write("rejection_resample", cases)


# ------------------------------------------------------------------------------ ragged_batch
def record_ragged_batch() -> None:
    import tensorflow as tf

    cases: dict[str, Any] = {}

    def case(name: str, elements: list[Any], signature: Any, batch_size: int,
             drop_remainder: bool = False) -> None:
        dataset = generator_dataset(elements, signature).ragged_batch(
            batch_size, drop_remainder=drop_remainder)
        cases[name] = {"input": [enc(e) for e in elements], "signature": spec_json(signature),
                       "batch_size": batch_size, "drop_remainder": drop_remainder,
                       "output": listed(dataset)}

    vectors = [np.arange(n, dtype=np.int64) for n in range(6)]
    case("vectors", vectors, tf.TensorSpec([None], tf.int64), 4)
    case("vectors_drop_remainder", vectors, tf.TensorSpec([None], tf.int64), 4, True)
    case("scalars", [np.float32(x) / 2 for x in range(5)], tf.TensorSpec([], tf.float32), 2)
    case("fixed_shape", [np.full(3, x, np.int32) for x in range(5)],
         tf.TensorSpec([3], tf.int32), 2)
    case("inner_dense_dim", [np.full((n, 3), n, np.float32) for n in (2, 1, 0, 3)],
         tf.TensorSpec([None, 3], tf.float32), 3)
    case("two_ragged_dims", [np.full((n, m), n * 10 + m, np.int64)
                             for n, m in ((2, 3), (1, 1), (0, 4), (3, 0), (1, 2))],
         tf.TensorSpec([None, None], tf.int64), 2)
    case("ragged_inner_only", [np.full((2, m), m, np.int64) for m in (3, 1, 0, 2)],
         tf.TensorSpec([2, None], tf.int64), 3)
    mixed = [(np.int64(i), np.arange(i, dtype=np.float32), np.array([i, -i], np.int64),
              np.array([b"w"] * i, dtype=object)) for i in range(5)]
    case("tuple_mixed", mixed, (tf.TensorSpec([], tf.int64), tf.TensorSpec([None], tf.float32),
                                tf.TensorSpec([2], tf.int64), tf.TensorSpec([None], tf.string)),
         2)
    dicts = [{"ids": np.arange(i, dtype=np.int64), "label": np.int64(i % 2)} for i in range(4)]
    case("dict", dicts, {"ids": tf.TensorSpec([None], tf.int64),
                         "label": tf.TensorSpec([], tf.int64)}, 3)
    ragged = [tf.ragged.constant(rows, dtype=tf.int64, ragged_rank=1) for rows in
              ([[1], [2, 3]], [[4, 5, 6]], [], [[7], [], [8]])]
    case("ragged_elements", ragged, tf.RaggedTensorSpec([None, None], tf.int64, ragged_rank=1), 3)
    write("ragged_batch", cases)


# ----------------------------------------------------------------------------------- counter
def record_counter() -> None:
    import tensorflow as tf

    cases: dict[str, Any] = {}

    def case(name: str, dataset: Any, take: int) -> None:
        cases[name] = {"output": listed(dataset.take(take)),
                       "cardinality": int(dataset.cardinality())}

    case("default", tf.data.Dataset.counter(), 5)
    case("start_step", tf.data.Dataset.counter(start=3, step=-2), 6)
    case("int32", tf.data.Dataset.counter(start=10, step=3, dtype=tf.int32), 4)
    case("int32_overflow", tf.data.Dataset.counter(start=2**31 - 3, step=2, dtype=tf.int32), 4)
    case("int8_overflow", tf.data.Dataset.counter(start=120, step=5, dtype=tf.int8), 4)
    case("uint8_wraps", tf.data.Dataset.counter(start=250, step=3, dtype=tf.uint8), 4)
    # Floats accumulate: element k is ((start + step) + step) ..., not start + k * step.
    case("float32_accumulates", tf.data.Dataset.counter(start=0.1, step=0.1,
                                                        dtype=tf.float32), 30)
    case("float64", tf.data.Dataset.counter(start=-1.5, step=0.7, dtype=tf.float64), 12)
    case("zero_step", tf.data.Dataset.counter(start=7, step=0), 3)
    write("counter", cases)


# ----------------------------------------------------------------------------- parse_example
def example(features: dict[str, Any]) -> bytes:
    import tensorflow as tf

    feature = {}
    for key, values in features.items():
        if values and isinstance(values[0], bytes):
            feature[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        elif values and isinstance(values[0], float):
            feature[key] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        else:
            feature[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


RAGGED_EXAMPLES = [
    {"v": [3, 1, 4, 1, 5, 9], "s1": [0, 2, 3, 3, 6], "s2": [0, 2, 3, 4], "lens": [2, 1, 0, 3],
     "starts": [0, 2, 3, 3], "limits": [2, 3, 3, 6], "rowids": [0, 0, 1, 3, 3, 3],
     "f": [1.5, 2.5, 3.25], "b": [b"a", b"bc", b""], "u": [1, 2, 3, 4, 5, 6],
     "us": [0, 1, 3], "ul": [1, 2]},
    {"v": [2, 7, 1, 8, 2, 8, 1], "s1": [0, 3, 4, 5, 7], "s2": [0, 1, 1, 4],
     "lens": [3, 1, 1, 2], "starts": [0, 3, 4, 5], "limits": [3, 4, 5, 7],
     "rowids": [0, 0, 0, 1, 2, 3, 3], "b": [b"xyz"], "u": [7, 8, 9, 10], "us": [0, 2],
     "ul": [2]},
    {"v": [5], "s1": [0, 1], "s2": [0, 1], "lens": [1], "starts": [0], "limits": [1],
     "rowids": [0], "f": [-0.5], "us": [0], "ul": []},
]


def ragged(dtype: str, value_key: str | None = None, partitions: list[Any] = (),
           row_splits_dtype: str = "int32") -> dict[str, Any]:
    """A RaggedFeature as JSON; partitions are [kind, key or length] pairs."""
    return {"type": "RaggedFeature", "dtype": dtype, "value_key": value_key,
            "partitions": [list(p) for p in partitions], "row_splits_dtype": row_splits_dtype}


PARSE_CASES = {
    "ragged": (RAGGED_EXAMPLES, {
        "v": ragged("int64"),
        "no_partition": ragged("int64", "v"),
        "row_splits": ragged("int64", "v", [("RowSplits", "s1")]),
        "row_lengths": ragged("int64", "v", [("RowLengths", "lens")]),
        "row_starts": ragged("int64", "v", [("RowStarts", "starts")]),
        "row_limits": ragged("int64", "v", [("RowLimits", "limits")]),
        "value_rowids": ragged("int64", "v", [("ValueRowIds", "rowids")]),
        "two_partitions": ragged("int64", "v", [("RowSplits", "s2"), ("RowSplits", "s1")]),
        "floats": ragged("float32", "f"),
        "strings": ragged("string", "b"),
        "uniform_inner": ragged("int64", "u", [("UniformRowLength", 2)]),
        "uniform_inner_two": ragged("int64", "u", [("RowSplits", "us"),
                                                   ("UniformRowLength", 2)]),
        "missing": ragged("int64", "nowhere", [("RowLengths", "nowhere_lens")]),
    }),
    "ragged_uniform_outer": (RAGGED_EXAMPLES[:2], {
        "uniform_outer": ragged("int64", "v", [("UniformRowLength", 2), ("RowSplits", "s1")]),
        "lengths_then_uniform": ragged("int64", "u", [("RowLengths", "ul"),
                                                      ("UniformRowLength", 2)]),
    }),
    "ragged_int64_splits": (RAGGED_EXAMPLES, {
        "row_lengths": ragged("int64", "v", [("RowLengths", "lens")], "int64"),
        "floats": ragged("float32", "f", [], "int64"),
    }),
    "sparse": ([
        {"idx": [3, 0, 2], "val": [0.5, 1.5, 2.5], "ix0": [3, 20, 3], "ix1": [1, 0, 0],
         "t": [10, 11, 12]},
        {"idx": [4], "val": [-1.0], "ix0": [0], "ix1": [2], "t": []},
        {"t": [13]},
        {"idx": [1, 0], "val": [7.0, 8.0], "ix0": [5, 5], "ix1": [2, 1], "t": [14, 15]},
    ], {
        "one_dim": {"type": "SparseFeature", "index_key": "idx", "value_key": "val",
                    "dtype": "float32", "size": 5, "already_sorted": False},
        "already_sorted": {"type": "SparseFeature", "index_key": "idx", "value_key": "val",
                           "dtype": "float32", "size": 5, "already_sorted": True},
        "two_dims": {"type": "SparseFeature", "index_key": ["ix0", "ix1"], "value_key": "val",
                     "dtype": "float32", "size": [100, 3], "already_sorted": False},
        "t": {"type": "VarLenFeature", "dtype": "int64"},
    }),
}


def feature_spec(description: dict[str, Any]) -> Any:
    import tensorflow as tf

    kind = description["type"]
    if kind == "VarLenFeature":
        return tf.io.VarLenFeature(tf.as_dtype(description["dtype"]))
    if kind == "SparseFeature":
        return tf.io.SparseFeature(description["index_key"], description["value_key"],
                                   tf.as_dtype(description["dtype"]), description["size"],
                                   description["already_sorted"])
    partitions = [getattr(tf.io.RaggedFeature, p)(arg) for p, arg in description["partitions"]]
    return tf.io.RaggedFeature(tf.as_dtype(description["dtype"]), description["value_key"],
                               partitions, tf.as_dtype(description["row_splits_dtype"]))


def record_parse_example() -> None:
    import tensorflow as tf

    cases: dict[str, Any] = {}
    for name, (examples, described) in PARSE_CASES.items():
        records = [example(e) for e in examples]
        features = {key: feature_spec(d) for key, d in described.items()}
        batch = tf.io.parse_example(tf.constant(records), features)
        single = [tf.io.parse_single_example(record, features) for record in records]
        cases[name] = {"records": [r.hex() for r in records], "features": described,
                       "batch": enc(dict(batch)), "single": [enc(dict(s)) for s in single]}
    write("parse_example", cases)


# ------------------------------------------------------------------------------- cardinality
CARDINALITY_INPUTS = {"finite": 10, "empty": 0, "endless": None}


def record_cardinality() -> None:
    """``cardinality()`` of each operation over a finite, an empty and an endless input."""
    import tensorflow as tf

    def operations(ds: Any) -> dict[str, Any]:
        return {
            "group_by_window": ds.group_by_window(lambda x: x % 2, lambda k, w: w.batch(2),
                                                  window_size=2),
            "bucket_by_sequence_length": ds.bucket_by_sequence_length(
                lambda x: 1, [3], [2, 2], no_padding=True),
            "ragged_batch": ds.map(lambda x: tf.range(x)).ragged_batch(3),
            "ragged_batch_drop_remainder": ds.map(lambda x: tf.range(x)).ragged_batch(
                3, drop_remainder=True),
            "rejection_resample_as_is": ds.rejection_resample(
                lambda x: x % 2, [0.5, 0.5], [0.5, 0.5], seed=1),
            "rejection_resample_mixing": ds.rejection_resample(
                lambda x: x % 2, [0.5, 0.5], [0.8, 0.2], seed=1),
            "rejection_resample_filter_only": ds.rejection_resample(
                lambda x: x % 2, [1.0, 0.0], [0.8, 0.2], seed=1),
            "rejection_resample_estimated": ds.rejection_resample(
                lambda x: x % 2, [0.5, 0.5], seed=1),
        }

    cases: dict[str, Any] = {}
    for input_name, size in CARDINALITY_INPUTS.items():
        ds = tf.data.Dataset.range(10).repeat() if size is None else tf.data.Dataset.range(size)
        for name, dataset in operations(ds).items():
            cases.setdefault(name, {})[input_name] = int(dataset.cardinality())
    write("cardinality", cases)


RECORDERS = {"group_by_window": record_group_by_window,
             "bucket_by_sequence_length": record_bucket_by_sequence_length,
             "ragged_batch": record_ragged_batch, "counter": record_counter,
             "parse_example": record_parse_example, "cardinality": record_cardinality,
             "rejection_resample": record_rejection_resample}


def main() -> None:
    """Record every file, or those named on the command line (``record.py counter``)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    if not tf.__version__.startswith("2.21"):
        sys.exit(f"record with TensorFlow 2.21 (found {tf.__version__})")
    names = sys.argv[1:] or list(RECORDERS)
    unknown = sorted(set(names) - set(RECORDERS))
    if unknown:
        sys.exit(f"unknown golden files {unknown}; known: {sorted(RECORDERS)}")
    for name in names:  # rejection_resample last: 40 seeded runs per case take minutes
        RECORDERS[name]()


if __name__ == "__main__":
    main()
