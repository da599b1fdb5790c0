"""Port of tensorflow/python/data/experimental/kernel_tests/assert_cardinality_test.py."""

from __future__ import annotations

from typing import Any

from tfcases.harness import Suite, label, params

SUITE = Suite("assert_cardinality_test.py")
add = SUITE.add


def assert_cardinality(ns: Any, dataset: Any, n: int) -> Any:
    """TF's ``apply(tf.data.experimental.assert_cardinality(n))``; feedline's method."""
    if ns.name == "tensorflow":
        return dataset.apply(ns.tf_module.data.experimental.assert_cardinality(n))
    return dataset.assert_cardinality(n)


add("testCorrectCardinality", lambda ns: (lambda ds: [
    ns.cardinality(ds), ns.cardinality(assert_cardinality(ns, ds, 10)),
    ns.read_all(assert_cardinality(ns, ds, 10))])(
        ns.Dataset.range(10).filter(lambda x: True)), mode="value")

# TF asserts the message of each; the port records the error's category (and the tests in
# tests/transforms/test_assert_cardinality.py check the messages).
for p in (params(num_elements=[10, 1], asserted=[20, "INFINITE"])
          + params(num_elements=[10], asserted=[5, 1])):
    add("testIncorrectCardinality" + label(p), lambda ns, p=p: assert_cardinality(
        ns, ns.Dataset.range(p["num_elements"]),
        ns.INFINITE if p["asserted"] == "INFINITE" else p["asserted"]))

SUITE.checkpoint("AssertCardinalityDatasetCheckpointTest.testCardinality",
                 lambda ns: assert_cardinality(ns, ns.Dataset.range(200), 200))
