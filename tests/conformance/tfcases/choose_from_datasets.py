"""Port of tensorflow/python/data/kernel_tests/choose_from_datasets_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite

SUITE = Suite("choose_from_datasets_test.py")
add = SUITE.add

WORDS = [b"foo", b"bar", b"baz"]
# TF draws the choices with unseeded np.random; the port fixes them.
CHOICES = np.random.default_rng(3).integers(3, size=(15,)).astype(np.int64)
add("testChooseFromDatasets", lambda ns: ns.Dataset.choose_from_datasets(
    [ns.Dataset.from_tensors(w).repeat() for w in WORDS],
    ns.Dataset.from_tensor_slices(CHOICES)))

STEPS = np.asarray([0, 0, 0, 1, 1, 1, 2, 2, 2], dtype=np.int64)


def _three(ns):
    return [ns.Dataset.from_tensors(b"foo").repeat(2), ns.Dataset.from_tensors(b"bar").repeat(),
            ns.Dataset.from_tensors(b"baz").repeat()]


add("testChooseFromDatasetsStoppingOnEmptyDataset", lambda ns: ns.Dataset.choose_from_datasets(
    _three(ns), ns.Dataset.from_tensor_slices(STEPS), stop_on_empty_dataset=True))
add("testChooseFromDatasetsSkippingEmptyDatasets", lambda ns: ns.Dataset.choose_from_datasets(
    _three(ns), ns.Dataset.from_tensor_slices(STEPS), stop_on_empty_dataset=False))
add("testChooseFromDatasetsChoiceDatasetIsEmpty", lambda ns: ns.Dataset.choose_from_datasets(
    [ns.Dataset.from_tensors(w).repeat() for w in WORDS], choice_dataset=ns.Dataset.range(0),
    stop_on_empty_dataset=False))
add("testChooseFromDatasetsNested", lambda ns: ns.Dataset.choose_from_datasets(
    [ns.Dataset.range(10).window(2), ns.Dataset.range(10, 20).window(2)],
    ns.Dataset.range(2).repeat(5)).flat_map(lambda x: x))

add("testErrors[float_choices]", lambda ns: ns.Dataset.choose_from_datasets(
    [ns.Dataset.from_tensors(np.int32(0)), ns.Dataset.from_tensors(np.int32(1))],
    choice_dataset=ns.Dataset.from_tensors(np.float32(1.0))))
add("testErrors[non_scalar_choices]", lambda ns: ns.Dataset.choose_from_datasets(
    [ns.Dataset.from_tensors(np.int32(0)), ns.Dataset.from_tensors(np.int32(1))],
    choice_dataset=ns.Dataset.from_tensors(np.array([1.0], np.float32))))
add("testErrors[choice_out_of_range]", lambda ns: ns.Dataset.choose_from_datasets(
    [ns.Dataset.from_tensors(np.int32(0))], choice_dataset=ns.Dataset.from_tensors(np.int64(1))))
add("testErrors[no_datasets]", lambda ns: ns.Dataset.choose_from_datasets(
    datasets=[], choice_dataset=ns.Dataset.from_tensors(np.float32(1.0))))
add("testErrors[choice_dataset_None]", lambda ns: ns.Dataset.choose_from_datasets(
    [ns.Dataset.range(42)], choice_dataset=None))

# TF shuffles the choices with stateless_shuffle; any fixed permutation serves the port.
SHUFFLED = np.random.default_rng(12).permutation(np.repeat(np.arange(5, dtype=np.int64), 20))
SUITE.checkpoint("ChooseFromDatasetsCheckpointTest.test", lambda ns: ns.Dataset
                 .choose_from_datasets([ns.Dataset.range(20) for _ in range(5)],
                                       ns.Dataset.from_tensor_slices(SHUFFLED)))

# Beyond TF's test file (issue 43): int32 choices are TF's TypeError too.
add("testErrors[int32_choices]", lambda ns: ns.Dataset.choose_from_datasets(
    [ns.Dataset.from_tensors(np.int32(0)), ns.Dataset.from_tensors(np.int32(1))],
    choice_dataset=ns.Dataset.from_tensor_slices(np.array([0, 1], np.int32))))
