"""Port of tensorflow/python/data/kernel_tests/bucket_by_sequence_length_test.py.

TF shuffles the generated sequences with the unseeded ``random`` module; the port seeds it,
so the whole output is compared element for element.
"""

from __future__ import annotations

import random

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("bucket_by_sequence_length_test.py")
add = SUITE.add

BOUNDARIES, BATCH_SIZES, LENGTHS = [10, 20, 30], [10, 8, 4, 2], [8, 13, 25, 35]


def _length(ns):
    return lambda x, y=None: ns.shape(x)[0]


def _sequences(elements, seed):
    random.Random(seed).shuffle(elements)

    def gen():
        for el in elements:
            yield (np.array(el, np.int32),)
    return gen


def _drop_remainder(ns):
    elements = [[1] * length for count, length in zip([28, 7, 6, 5], LENGTHS)
                for _ in range(count)]
    return ns.from_generator(_sequences(elements, 1), (ns.TensorSpec([None], np.int32),)) \
        .bucket_by_sequence_length(element_length_func=_length(ns), bucket_boundaries=BOUNDARIES,
                                   bucket_batch_sizes=BATCH_SIZES, drop_remainder=True)


def _bucket(ns):
    elements = []
    for batch_size, length in zip(BATCH_SIZES, LENGTHS):
        record_len = length - 1
        for _ in range(batch_size):
            elements.append([1] * record_len)
            record_len = length
    return ns.from_generator(_sequences(elements, 2), (ns.TensorSpec([None], np.int32),)) \
        .bucket_by_sequence_length(element_length_func=_length(ns), bucket_boundaries=BOUNDARIES,
                                   bucket_batch_sizes=BATCH_SIZES)


def _pad_to_boundary(ns):
    elements = [[1] * length for batch_size, length in zip(BATCH_SIZES[:-1], LENGTHS[:-1])
                for _ in range(batch_size)]
    random.Random(3).shuffle(elements)

    def gen():
        for el in elements:
            yield (np.array(el, np.int64),)
        for _ in range(BATCH_SIZES[-1]):
            yield (np.ones(BOUNDARIES[-1] + 5, np.int64),)
    # The last sequences are longer than the last boundary: an error after three batches.
    return ns.from_generator(gen, (ns.TensorSpec([None], np.int64),)).bucket_by_sequence_length(
        element_length_func=_length(ns), bucket_boundaries=BOUNDARIES,
        bucket_batch_sizes=BATCH_SIZES, pad_to_bucket_boundary=True)


def _ones(lengths, dtype=np.int64):
    def gen():
        for length in lengths:
            yield (np.ones(length, dtype),)
    return gen


add("testBucketDropReminder[no_padding=False]", _drop_remainder)
add("testBucket[no_padding=False]", _bucket)
add("testPadToBoundary", _pad_to_boundary)
add("testPadToBoundaryNoExtraneousPadding", lambda ns: ns.from_generator(
    _ones(range(1, 11)), (ns.TensorSpec([None], np.int64),)).bucket_by_sequence_length(
        element_length_func=_length(ns), bucket_boundaries=[3, 7, 11],
        bucket_batch_sizes=[2, 2, 2, 2], pad_to_bucket_boundary=True))


def _tuples(ns):
    def gen():
        text = [[1, 2, 3], [3, 4, 5, 6, 7], [1, 2], [8, 9, 0, 2, 3]]
        for x, y in zip(text, [1, 2, 1, 2]):
            yield np.array(x, np.int32), np.int32(y)
    return ns.from_generator(gen, (ns.TensorSpec([None], np.int32), ns.TensorSpec([], np.int32))) \
        .bucket_by_sequence_length(element_length_func=_length(ns), bucket_batch_sizes=[2, 2, 2],
                                   bucket_boundaries=[0, 8])


add("testTupleElements[no_padding=False]", _tuples)
add("testTupleElements[no_padding=False,element_spec]", lambda ns: ns.spec(_tuples(ns)),
    mode="value")
add("testCardinality", lambda ns: ns.cardinality(ns.from_generator(
    _ones(range(1, 11)), (ns.TensorSpec([None], np.int64),)).repeat().bucket_by_sequence_length(
        element_length_func=_length(ns), bucket_boundaries=[3, 7, 11],
        bucket_batch_sizes=[2, 2, 2, 2], pad_to_bucket_boundary=True)), mode="value")

for name in ("testBucketDropReminder[no_padding=True]", "testBucket[no_padding=True]",
             "testTupleElements[no_padding=True]", "testBucketSparse"):
    SUITE.skip(name, "no_padding=True batches SparseTensors: feedline has no sparse tensors")
