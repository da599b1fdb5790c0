"""Port of tensorflow/python/data/kernel_tests/cardinality_test.py."""

from __future__ import annotations

import os
import tempfile

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("cardinality_test.py")


def _true(_):
    return True


def _zeros(n):
    return np.zeros(n, np.int32)


CASES = {
    "Map1": lambda D: D.range(5).map(lambda x: x),
    "Map2": lambda D: D.range(5).map(lambda x: x, num_parallel_calls=1),
    "Batch1": lambda D: D.range(5).batch(2, drop_remainder=True),
    "Batch2": lambda D: D.range(5).batch(2, drop_remainder=False),
    "Batch3": lambda D: D.range(5).filter(_true).batch(2),
    "Batch4": lambda D: D.range(5).repeat().batch(2),
    "Cache1": lambda D: D.range(5).cache(),
    # Never iterated: the file name only has to be a valid one.
    "Cache2": lambda D: D.range(5).cache(os.path.join(tempfile.gettempdir(), "tfcases-foo")),
    "Concatenate1": lambda D: D.range(5).concatenate(D.range(5)),
    "Concatenate2": lambda D: D.range(5).filter(_true).concatenate(D.range(5)),
    "Concatenate3": lambda D: D.range(5).repeat().concatenate(D.range(5)),
    "Concatenate4": lambda D: D.range(5).concatenate(D.range(5).filter(_true)),
    "Concatenate5": lambda D: D.range(5).filter(_true).concatenate(D.range(5).filter(_true)),
    "Concatenate6": lambda D: D.range(5).repeat().concatenate(D.range(5).filter(_true)),
    "Concatenate7": lambda D: D.range(5).concatenate(D.range(5).repeat()),
    "Concatenate8": lambda D: D.range(5).filter(_true).concatenate(D.range(5).repeat()),
    "Concatenate9": lambda D: D.range(5).repeat().concatenate(D.range(5).repeat()),
    "FlatMap": lambda D: D.range(5).flat_map(lambda _: D.from_tensors(np.int32(0))),
    "Filter": lambda D: D.range(5).filter(_true),
    "FromTensors1": lambda D: D.from_tensors(np.int32(0)),
    "FromTensors2": lambda D: D.from_tensors((np.int32(0), np.int32(1))),
    "FromTensorSlices1": lambda D: D.from_tensor_slices(_zeros(3)),
    "FromTensorSlices2": lambda D: D.from_tensor_slices((_zeros(3), _zeros(3) + 1)),
    "Interleave1": lambda D: D.range(5).interleave(lambda _: D.from_tensors(np.int32(0)),
                                                   cycle_length=1),
    "Interleave2": lambda D: D.range(5).interleave(lambda _: D.from_tensors(np.int32(0)),
                                                   cycle_length=1, num_parallel_calls=1),
    "Interleave3": lambda D: D.range(5).repeat().interleave(
        lambda _: D.from_tensors(np.int32(0)), cycle_length=1, num_parallel_calls=1),
    "PaddedBatch1": lambda D: D.range(5).padded_batch(2, [], drop_remainder=True),
    "PaddedBatch2": lambda D: D.range(5).padded_batch(2, [], drop_remainder=False),
    "PaddedBatch3": lambda D: D.range(5).filter(_true).padded_batch(2, []),
    "PaddedBatch4": lambda D: D.range(5).repeat().padded_batch(2, []),
    "Prefetch": lambda D: D.range(5).prefetch(buffer_size=1),
    "Range1": lambda D: D.range(0),
    "Range2": lambda D: D.range(5),
    "Range3": lambda D: D.range(5, 10),
    "Range4": lambda D: D.range(10, 5),
    "Range5": lambda D: D.range(5, 10, 2),
    "Range6": lambda D: D.range(10, 5, -2),
    "Range7": lambda D: D.range(0, 0, -2),
    "Range8": lambda D: D.range(3, 3, 1),
    "Range9": lambda D: D.range(-4, -4, 2),
    "Range10": lambda D: D.range(1, 0, 3),
    "Range11": lambda D: D.range(0, 1, -3),
    "Repeat1": lambda D: D.range(0).repeat(0),
    "Repeat2": lambda D: D.range(1).repeat(0),
    "Repeat3": lambda D: D.range(0).repeat(5),
    "Repeat4": lambda D: D.range(1).repeat(5),
    "Repeat5": lambda D: D.range(0).repeat(),
    "Repeat6": lambda D: D.range(1).repeat(),
    "Shuffle": lambda D: D.range(5).shuffle(buffer_size=1),
    "Shard1": lambda D: D.range(5).shard(2, 0),
    "Shard2": lambda D: D.range(5).shard(8, 7),
    "Shard3": lambda D: D.range(5).filter(_true).shard(2, 0),
    "Shard4": lambda D: D.range(5).repeat().shard(2, 0),
    "Skip1": lambda D: D.range(5).skip(2),
    "Skip2": lambda D: D.range(5).skip(8),
    "Skip3": lambda D: D.range(5).filter(_true).skip(2),
    "Skip4": lambda D: D.range(5).repeat().skip(2),
    "Take1": lambda D: D.range(5).take(2),
    "Take2": lambda D: D.range(5).take(8),
    "Take3": lambda D: D.range(5).filter(_true).take(2),
    "Take4": lambda D: D.range(5).repeat().take(2),
    "Window1": lambda D: D.range(5).window(size=2, shift=2, drop_remainder=True),
    "Window2": lambda D: D.range(5).window(size=2, shift=2, drop_remainder=False),
    "Zip1": lambda D: D.zip(D.range(5)),
    "Zip2": lambda D: D.zip((D.range(5), D.range(3))),
    "Zip3": lambda D: D.zip((D.range(5), D.range(3).repeat())),
    "Zip4": lambda D: D.zip((D.range(5).repeat(), D.range(3).repeat())),
    "Zip5": lambda D: D.zip((D.range(5), D.range(3).filter(_true))),
}
for name, fn in CASES.items():
    SUITE.add(f"testCardinality[{name}]", lambda ns, fn=fn: ns.cardinality(fn(ns.Dataset)),
              mode="value", tf_test="testCardinality")
