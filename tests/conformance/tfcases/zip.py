"""Port of tensorflow/python/data/kernel_tests/zip_test.py."""

from __future__ import annotations

import collections

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("zip_test.py")
add = SUITE.add

EQUAL = [np.tile(np.array([[1], [2], [3], [4]]), 20),
         np.tile(np.array([[12], [13], [14], [15]]), 22),
         np.array([37.0, 38.0, 39.0, 40.0])]


def _zip(ns, components):
    return ns.Dataset.zip(tuple(ns.Dataset.from_tensor_slices(c) for c in components))


def _nested(ns, last):
    d = [ns.Dataset.from_tensor_slices(c) for c in (EQUAL[0], EQUAL[1], last)]
    return ns.Dataset.zip((d[0], (d[1], d[2])))


add("testZipEqual", lambda ns: _zip(ns, EQUAL))
add("testZipUnequal", lambda ns: _zip(ns, [np.array([1, 2, 3, 4], np.int32),
                                           np.array([1, 2, 3, 4, 5], np.int32),
                                           np.array([1.0, 2.0], np.float32)]))
add("testNested", lambda ns: _nested(ns, EQUAL[2]))
add("testNested[element_spec]", lambda ns: ns.spec(_nested(ns, EQUAL[2])), mode="value")
Foo = collections.namedtuple("Foo", ["x", "y"])
add("testNamedTuple", lambda ns: ns.Dataset.zip(Foo(x=ns.Dataset.range(3),
                                                    y=ns.Dataset.range(3, 6))))
add("testNamedTuple[element_spec]", lambda ns: ns.spec(ns.Dataset.zip(
    Foo(x=ns.Dataset.range(3), y=ns.Dataset.range(3, 6)))), mode="value")

SUITE.checkpoint("ZipCheckpointTest.testCore[equal]", lambda ns: _nested(ns, EQUAL[2]))
SUITE.checkpoint("ZipCheckpointTest.testCore[unequal]",
                 lambda ns: _nested(ns, np.array([1.0, 2.0])))

SUITE.skip("testAttrs", "attrs classes as element structures (tf.nest's attr.s support; "
           "feedline's nests are tuple, namedtuple and dict)")
