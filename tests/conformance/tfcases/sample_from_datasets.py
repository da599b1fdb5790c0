"""Port of tensorflow/python/data/kernel_tests/sample_from_datasets_test.py.

Which dataset each draw picks is TF's random generator's; the cases record what TF's tests
assert: frequencies within the chi-squared bound, counts, and whether epochs repeat.
"""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite, plain, restored_matches_count, values

SUITE = Suite("sample_from_datasets_test.py")
add = SUITE.add

WEIGHT_TYPES = ("list", "tensor", "dataset")


def _weights(ns, weights, kind):
    if kind == "list":
        return list(weights)
    if kind == "tensor":
        return np.asarray(weights)
    return ns.Dataset.from_tensors(np.asarray(weights)).repeat()


RAND_PROBS = np.random.default_rng(1619).random(5)
RAND_PROBS = RAND_PROBS / RAND_PROBS.sum()


def _chi2_ok(probs):
    def derive(elements):
        freqs = np.zeros(len(probs))
        for e in elements:
            freqs[int(np.asarray(e))] += 1
        diff = freqs / len(elements) - np.asarray(probs)
        return {"count": len(elements), "chi2_below_0.01": bool(np.sum(diff * diff / probs) < 1e-2)}
    return derive


for kind in WEIGHT_TYPES:
    tag = f"[weights_type={kind}]"
    for i, probs in enumerate(([0.85, 0.05, 0.1], RAND_PROBS, [1.0])):
        add(f"testSampleFromDatasets{tag}[probs={i}]",
            lambda ns, p=probs, k=kind: ns.Dataset.sample_from_datasets(
                [ns.Dataset.from_tensors(np.int64(c)).repeat() for c in range(len(p))],
                _weights(ns, p, k)).take(5000), derive=_chi2_ok(probs))

    def three(ns):
        return [ns.Dataset.from_tensors(np.int64(-1)),
                ns.Dataset.from_tensors(np.int64(1)).repeat(), ns.Dataset.range(10).repeat()]

    add(f"testSampleFromDatasetsStoppingOnEmptyDataset{tag}",
        lambda ns, k=kind, three=three: ns.Dataset.sample_from_datasets(
            three(ns), weights=_weights(ns, [0.5, 0.1, 0.4], k), stop_on_empty_dataset=True),
        derive=lambda es: {"count_of_-1": [plain(e) for e in es].count(-1)})
    add(f"testSampleFromDatasetsSkippingEmptyDataset{tag}",
        lambda ns, k=kind, three=three: ns.Dataset.sample_from_datasets(
            three(ns), weights=_weights(ns, [0.5, 0.1, 0.4], k), stop_on_empty_dataset=False)
        .take(100),
        derive=lambda es: {"len": len(es), "count_of_-1": [plain(e) for e in es].count(-1)})
    add(f"testSampleFromDatasetsWithZeroWeight{tag}",
        lambda ns, k=kind: ns.Dataset.sample_from_datasets(
            [ns.Dataset.from_tensors(np.int32(-1)).repeat(2),
             ns.Dataset.from_tensors(np.int32(1)).repeat(2)],
            weights=_weights(ns, [0.0, 1.0], k), stop_on_empty_dataset=True))
    add(f"testSampleFromEmptyDataset{tag}",
        lambda ns, k=kind: ns.Dataset.sample_from_datasets(
            [ns.Dataset.range(0), ns.Dataset.range(1).repeat()],
            weights=_weights(ns, [1.0, 0.0], k), stop_on_empty_dataset=True))

add("testSampleFromDatasetsSkippingDatasetsWithZeroWeight", lambda ns: ns.Dataset
    .sample_from_datasets([ns.Dataset.from_tensors(np.int32(-1)).repeat(),
                           ns.Dataset.from_tensors(np.int32(1))],
                          weights=np.asarray([0.0, 1.0]), stop_on_empty_dataset=False))
add("testSampleFromDatasetsAllWeightsAreZero", lambda ns: ns.Dataset.sample_from_datasets(
    [ns.Dataset.from_tensors(np.int32(-1)).repeat(), ns.Dataset.from_tensors(np.int32(1)).repeat()],
    weights=np.asarray([0.0, 0.0]), stop_on_empty_dataset=False))
add("testSampleFromDatasetsCardinality", lambda ns: ns.cardinality(
    ns.Dataset.sample_from_datasets([
        ns.Dataset.from_tensors(np.array([1.0], np.float32)).repeat(),
        ns.Dataset.from_tensors(np.array([2.0], np.float32)).repeat()])), mode="value")
add("testSampleFromDatasetsNested", lambda ns: (lambda first: [
    plain(first) in ([0, 1], [10, 11])])(ns.head(ns.Dataset.sample_from_datasets(
        [ns.Dataset.range(10).window(2), ns.Dataset.range(10, 20).window(2)],
        weights=[0.3, 0.7]).flat_map(lambda x: x).batch(2), 1)[0]), mode="value")


def _sample(ns, rerandomize):
    return ns.Dataset.sample_from_datasets(
        [ns.Dataset.range(0, 10), ns.Dataset.range(100, 110)], seed=42, weights=[0.5, 0.5],
        stop_on_empty_dataset=True, rerandomize_each_iteration=rerandomize)


for rerandomize in (None, True, False):
    add(f"testSampleFromDatasetsRerandomizeEachIterationEpochs[rerandomize={rerandomize}]",
        lambda ns, r=rerandomize: (lambda ds: values(ns, ds) == values(ns, ds))(
            _sample(ns, r)), mode="value")
    add(f"testSampleFromDatasetsRerandomizeRepeatEpochs[rerandomize={rerandomize}]",
        lambda ns, r=rerandomize: (lambda out: out[:len(out) // 2] == out[len(out) // 2:])(
            values(ns, _sample(ns, r).repeat(2))), mode="value")

add("testErrors[weights_length]", lambda ns: ns.Dataset.sample_from_datasets(
    [ns.Dataset.range(10), ns.Dataset.range(20)], weights=[0.25, 0.25, 0.25, 0.25]))
add("testErrors[integer_weights]", lambda ns: ns.Dataset.sample_from_datasets(
    [ns.Dataset.range(10), ns.Dataset.range(20)], weights=[1, 1]))
add("testErrors[incompatible_structures]", lambda ns: ns.Dataset.sample_from_datasets(
    [ns.Dataset.from_tensors(np.int32(0)), ns.Dataset.from_tensors(np.float32(0.0))]))
add("testErrors[no_datasets]", lambda ns: ns.Dataset.sample_from_datasets(datasets=[],
                                                                          weights=[]))

SUITE.checkpoint("SampleFromDatasetsCheckpointTest.test", lambda ns: ns.Dataset
                 .sample_from_datasets([ns.Dataset.from_tensors(np.int32(i)).repeat(None)
                                        for i in range(2)], [0.5, 0.5], seed=1813).take(100),
                 derive=restored_matches_count)

SUITE.skip("testSampleFromDatasetsRerandomizeInsideFunction", "dataset built inside a "
           "tf.function")
