"""Port of tensorflow/python/data/kernel_tests/counter_test.py."""

from __future__ import annotations

from tfcases.harness import Suite

SUITE = Suite("counter_test.py")
add = SUITE.add

for start, step in ((3, 4), (0, -1)):
    add(f"testCounter[start={start},step={step}]",
        lambda ns, a=start, b=step: ns.Dataset.counter(a, b).take(3))
    add(f"testCounter[start={start},step={step},element_spec]",
        lambda ns, a=start, b=step: ns.spec(ns.Dataset.counter(a, b)), mode="value")
