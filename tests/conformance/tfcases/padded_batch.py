"""Port of tensorflow/python/data/kernel_tests/padded_batch_test.py.

TF draws its sequence lengths with ``np.random`` unseeded; the port seeds them (the
recorded results need the same lengths on both sides).
"""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite, label, params

SUITE = Suite("padded_batch_test.py")
add = SUITE.add


def _lengths(n, seed, low=0, high=20):
    return np.random.default_rng(seed).integers(low, high, size=(n,)).astype(np.int32)


def _fill(ns):
    return lambda x: ns.fill(ns.stack([x]), x)


for p in params(count=[32, 34], padded_shapes=[[None], [25]], drop_remainder=[True, False]):
    add("testPaddedBatchDataset" + label(p),
        lambda ns, p=p: ns.Dataset.from_tensor_slices(_lengths(p["count"], p["count"]))
        .map(_fill(ns)).padded_batch(batch_size=4, drop_remainder=p["drop_remainder"],
                                     padded_shapes=p["padded_shapes"]))


def _ints(values):
    return np.array(values, np.int32)


add("testPaddedBatchShortPadding", lambda ns: ns.Dataset.from_tensor_slices(
    _ints([6, 5, 5, 5, 5])).map(_fill(ns)).padded_batch(batch_size=4, padded_shapes=[5]))
add("testPaddedBatchEmptyTensors", lambda ns: ns.Dataset.from_tensor_slices(
    _ints([0, 0, 0, 0])).map(_fill(ns)).padded_batch(batch_size=4, padded_shapes=[-1]))
add("testDefaultPaddedShapes", lambda ns: ns.Dataset.from_tensor_slices(
    _ints([1, 2, 3, 4])).map(_fill(ns)).padded_batch(batch_size=2))
add("testNestedDefaultPaddedShapes", lambda ns: ns.Dataset.from_tensor_slices(
    _ints([1, 2, 3, 4])).map(lambda x: (x, _fill(ns)(x))).padded_batch(batch_size=2))


def _fill_tuple(ns):
    def fn(x):
        filled = _fill(ns)(x)
        return (filled, ns.as_string(filled), {"structure": ns.as_string(filled)})
    return fn


for tag, values in (("dict_padding", (np.int32(-1), "<end>", {"structure": ""})),
                    ("dict_padding_None", (np.int32(-1), "<end>", None))):
    add(f"testPaddedBatchDatasetNonDefaultPadding[{tag}]",
        lambda ns, v=values: ns.Dataset.from_tensor_slices(_lengths(32, 7))
        .map(_fill_tuple(ns)).padded_batch(
            4, padded_shapes=([-1], [-1], {"structure": [-1]}), padding_values=v))


def _unicode(ns):
    def gen():
        data = [["Простой", "тест", "юникода"], ["никогда", "не", "бывает", "простым"]]
        for seq in data:
            yield (np.array([s.encode() for s in seq], object), np.array([0, 1, 2, 3], np.int32))
    ds = ns.from_generator(gen, (ns.TensorSpec([None], bytes), ns.TensorSpec([None], np.int32)))
    return ds.padded_batch(2, padded_shapes=([None], [None]), padding_values=("", np.int32(0)))


add("testPaddedBatchDatasetUnicode", _unicode)
add("testPaddedBatchShapeErrorWrongRank",
    lambda ns: ns.Dataset.range(10).padded_batch(5, padded_shapes=[1]))
add("testPaddedBatchShapeErrorTooSmall", lambda ns: ns.Dataset.from_tensors(
    _ints([1, 2, 3])).padded_batch(5, padded_shapes=[1]))
add("testPaddedBatchShapeErrorShapeNotRank1", lambda ns: ns.Dataset.from_tensors(
    _ints([1, 2, 3])).padded_batch(5, padded_shapes=[[1, 1], [1, 1]]))
add("testPaddedBatchShapeErrorShapeNotInt", lambda ns: ns.Dataset.from_tensors(
    _ints([1, 2, 3])).padded_batch(5, padded_shapes=np.array([1.5, 2.0, 3.0], np.float32)))
add("testPaddedBatchShapeErrorWrongRankFromTensor", lambda ns: ns.Dataset.range(10)
    .padded_batch(5, padded_shapes=np.array([1], np.int64)))
add("testDefaultPaddedValueShapes", lambda ns: ns.Dataset.zip(
    (ns.Dataset.from_tensor_slices(_ints([1, 2, 3, 4])).map(_fill(ns)),
     ns.Dataset.from_tensor_slices(_ints([1, 2, 3, 4])).map(_fill(ns))))
    .padded_batch(batch_size=2, padding_values=np.int32(-1)))

SUITE.checkpoint("PaddedBatchCheckpointTest.testPaddedBatch", lambda ns: ns.Dataset
                 .from_tensor_slices(_lengths(32, 11, 1)).map(_fill(ns))
                 .padded_batch(4, padded_shapes=[-1]))
SUITE.checkpoint("PaddedBatchCheckpointTest.testPaddedBatchNonDefaultPadding",
                 lambda ns: ns.Dataset.from_tensor_slices(_lengths(32, 12, 1))
                 .map(lambda x: (lambda f: (f, ns.as_string(f)))(_fill(ns)(x)))
                 .padded_batch(4, padded_shapes=([-1], [-1]),
                               padding_values=(np.int32(-1), "<end>")))

SUITE.skip("testPaddedBatchDatasetShapeSpecifications", "graph-mode placeholders; shapes given "
           "as TensorShape / int64 tensors")
SUITE.skip("testPaddedBatchShapeErrorPlaceholder", "graph-mode placeholder as padded shape")
SUITE.skip("testPaddedBatchSparseError", "SparseTensor: feedline has no sparse tensors")
SUITE.skip("testPaddedBatchRaggedError", "RaggedTensorValue elements")
SUITE.skip("testPaddedBatchShapeErrorDefaultShapeWithUnknownRank", "unknown-rank static "
           "element specs (from_generator with output_types only)")
SUITE.skip("testPaddedBatchBfloat16", "bfloat16: NumPy has no such dtype")
