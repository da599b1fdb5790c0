"""Port of tensorflow/python/data/kernel_tests/repeat_test.py."""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite, attempt, derive_sorted, label, params, plain, restored_matches

SUITE = Suite("repeat_test.py")
add = SUITE.add

COMPONENTS = (np.array(1), np.array([1, 2, 3]), np.array(37.0))

for count in (0, 3, 7):
    add(f"testFiniteRepeat[count={count}]",
        lambda ns, c=count: ns.Dataset.from_tensors(COMPONENTS).repeat(c))
add("testFiniteRepeat[element_spec]",
    lambda ns: ns.spec(ns.Dataset.from_tensors(COMPONENTS).repeat(3)), mode="value")
add("testInfiniteRepeat", lambda ns: ns.Dataset.from_tensors(COMPONENTS).repeat(-1).take(17))
add("testRepeatRepeat", lambda ns: ns.Dataset.from_tensors(COMPONENTS).repeat(7).repeat(14))
add("testName", lambda ns: ns.Dataset.from_tensors(np.int32(42)).repeat(1, name="repeat"))

SUITE.checkpoint("RepeatDatasetCheckpointTest.testFiniteRepeat",
                 lambda ns: ns.Dataset.range(10).repeat(10))
SUITE.checkpoint("RepeatDatasetCheckpointTest.testEmptyRepeat",
                 lambda ns: ns.Dataset.range(10).repeat(0))
SUITE.checkpoint("RepeatDatasetCheckpointTest.testInfiniteRepeat",
                 lambda ns: ns.Dataset.zip((ns.Dataset.range(10).repeat(-1),
                                            ns.Dataset.range(100))))
SUITE.checkpoint("RepeatDatasetCheckpointTest.testInfiniteEmptyRepeat",
                 lambda ns: ns.Dataset.range(0).repeat(-1))

# ------------------------------------------------------------------ random access
for index in (-1, 6, 7):
    add(f"RepeatRandomAccessTest.testInvalidIndex[index={index}]",
        lambda ns, i=index: ns.at(ns.Dataset.from_tensor_slices(
            np.array([1, 2, 3], np.int32)).repeat(2), i), mode="value")
for index in (-1, 0):
    add(f"RepeatRandomAccessTest.testEmptyDataset[index={index}]",
        lambda ns, i=index: ns.at(ns.Dataset.from_tensor_slices(
            np.array([], np.float32)).repeat(2), i), mode="value")


def _all_at(ns, ds, n):
    return [attempt(ns, lambda i=i: ns.at(ds, i)) for i in range(n)]


for p in params(elements=[0, 5, 10], count=[0, 3, 8]):
    add("RepeatRandomAccessTest.testFiniteRepeat" + label(p),
        lambda ns, e=p["elements"], c=p["count"]: _all_at(
            ns, ns.Dataset.range(e).repeat(c), e * c + 1), mode="value")
for p in params(elements=[0, 3, 5], count_1=[0, 1, 2], count_2=[3, 4, 5]):
    add("RepeatRandomAccessTest.testRepeatRepeat" + label(p),
        lambda ns, e=p["elements"], c1=p["count_1"], c2=p["count_2"]: _all_at(
            ns, ns.Dataset.range(e).repeat(c1).repeat(c2), e * c1 * c2 + 1), mode="value")
for p in params(elements=[3, 5], count=[None, -1, -2]):
    add("RepeatRandomAccessTest.testInfiniteRepeat" + label(p),
        lambda ns, e=p["elements"], c=p["count"]: ns.at(
            ns.Dataset.range(e).repeat(count=c), 0), mode="value")


# ------------------------------------------------------------------ global shuffle
def _shuffle_properties(dataset_range, repetitions):
    """What RepeatGlobalShuffleTest asserts of the (random) order."""
    def derive(elements):
        out = [plain(e) for e in elements]
        expected = list(range(dataset_range)) * repetitions
        chunks = [out[i:i + dataset_range] for i in range(0, len(out), dataset_range)]
        return {"sorted": derive_sorted(elements),
                "shuffled": out != expected,
                "every_epoch_shuffled": all(c != list(range(dataset_range)) for c in chunks[1:]),
                "epochs_differ": all(chunks[i] != chunks[i - 1] for i in range(1, len(chunks)))}
    return derive


for p in params(repetitions=[1, 27], seed=[None, 19], reshuffle_each_iteration=[True, False]):
    add("RepeatGlobalShuffleTest.testRepeat" + label(p),
        lambda ns, p=p: ns.global_shuffle(
            ns.Dataset.range(41).repeat(p["repetitions"]).prefetch(ns.AUTOTUNE),
            seed=p["seed"], reshuffle_each_iteration=p["reshuffle_each_iteration"]),
        derive=_shuffle_properties(41, p["repetitions"]))
for repetitions in (None, 0):
    add(f"RepeatGlobalShuffleTest.testInvalidDataset[repetitions={repetitions}]",
        lambda ns, r=repetitions: ns.global_shuffle(
            ns.Dataset.range(10).repeat(r).prefetch(ns.AUTOTUNE)))
for p in params(repetitions=[1, 27], reshuffle_each_iteration=[True, False]):
    SUITE.checkpoint(
        "RepeatGlobalShuffleCheckpointTest.testRepeat" + label(p),
        lambda ns, p=p: ns.global_shuffle(
            ns.Dataset.range(41).repeat(p["repetitions"]).prefetch(ns.AUTOTUNE), seed=42,
            reshuffle_each_iteration=p["reshuffle_each_iteration"]),
        # TF compares only the multiset when each iteration reshuffles.
        derive=derive_sorted if p["reshuffle_each_iteration"] else restored_matches)

SUITE.skip("RepeatDatasetCheckpointTest (symbolic_checkpoint=True)",
           "Options.experimental_symbolic_checkpoint: a TF checkpoint format; each "
           "checkpoint case runs once")
