"""Port of tensorflow/python/data/kernel_tests/len_test.py."""

from __future__ import annotations

from tfcases.harness import Suite

SUITE = Suite("len_test.py")
add = SUITE.add

add("testKnown", lambda ns: len(ns.Dataset.range(10)), mode="value")
add("testInfinite", lambda ns: len(ns.Dataset.range(10).repeat()), mode="value")
add("testUnknown", lambda ns: len(ns.Dataset.range(10).filter(lambda x: True)), mode="value")

SUITE.skip("testGraphMode", "graph mode (len while tracing)")
