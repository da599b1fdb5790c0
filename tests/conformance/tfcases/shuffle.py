"""Port of tensorflow/python/data/kernel_tests/shuffle_test.py.

A seeded shuffle's order is TF's random generator's, which feedline does not reproduce
(DESIGN.md: the distribution matches, not the draws). The cases record what TF's tests
assert about it: the multiset, and whether two runs or two epochs give the same order.
"""

from __future__ import annotations

import numpy as np

from tfcases.harness import Suite, derive_sorted, restored_matches, values

SUITE = Suite("shuffle_test.py")
add = SUITE.add

COMPONENTS = (np.array([1, 2, 3, 4], np.int64), np.array([5, 6, 7, 8], np.int64),
              np.array([9.0, 10.0, 11.0, 12.0]))


def _basic(ns, count=5, buffer_size=None, seed=0):
    ds = ns.Dataset.from_tensor_slices(COMPONENTS).repeat(count)
    return ds.shuffle(buffer_size, seed) if buffer_size else ds


add("testBasic[unshuffled]", lambda ns: _basic(ns))
add("testBasic[buffer_size=100,seed=37]", lambda ns: _basic(ns, buffer_size=100, seed=37),
    derive=derive_sorted)
add("testBasic[same_seed_same_order]", lambda ns: values(
    ns, _basic(ns, buffer_size=100, seed=37)) == values(ns, _basic(ns, buffer_size=100, seed=37)),
    mode="value")
add("testBasic[other_seed_other_order]", lambda ns: values(
    ns, _basic(ns, buffer_size=100, seed=37)) != values(ns, _basic(ns, buffer_size=100, seed=137)),
    mode="value")
add("testBasic[buffer_size=100,seed=137]", lambda ns: _basic(ns, buffer_size=100, seed=137),
    derive=derive_sorted)
add("testBasic[buffer_size=2,seed=37]", lambda ns: _basic(ns, buffer_size=2, seed=37),
    derive=derive_sorted)
add("testBasic[empty]", lambda ns: _basic(ns, count=0, buffer_size=100, seed=37))
add("testBasic[element_spec]", lambda ns: ns.spec(_basic(ns, buffer_size=100, seed=37)),
    mode="value")

add("testDefaultArguments", lambda ns: ns.Dataset.from_tensor_slices(
    np.arange(5, dtype=np.int64)).shuffle(5).repeat().take(50), derive=derive_sorted)

for reshuffle in (True, False):
    # TF's graph-seed combinations need graph mode; with an op seed two runs agree.
    add(f"testShuffleSeed[reshuffle={reshuffle},op_seed=42]",
        lambda ns, r=reshuffle: values(ns, ns.Dataset.range(10).shuffle(
            10, seed=42, reshuffle_each_iteration=r).repeat(3)) == values(
            ns, ns.Dataset.range(10).shuffle(10, seed=42, reshuffle_each_iteration=r).repeat(3)),
        mode="value")
    add(f"testMultipleIterators[reshuffle={reshuffle}]",
        lambda ns, r=reshuffle: (lambda ds: values(ns, ds) != values(ns, ds))(
            ns.Dataset.range(100).shuffle(10, reshuffle_each_iteration=r).repeat(3)),
        mode="value")


def _epochs_equal(ns, reshuffle, seed):
    out = values(ns, ns.Dataset.range(10).shuffle(
        10, seed=seed, reshuffle_each_iteration=reshuffle).repeat(2))
    return out[:10] == out[10:]


def _iterations_equal(ns, reshuffle, seed):
    ds = ns.Dataset.range(10).shuffle(10, seed=seed, reshuffle_each_iteration=reshuffle)
    return values(ns, ds) == values(ns, ds)


def _separate_equal(ns, reshuffle, seed):
    ds = ns.Dataset.range(10)
    return (values(ns, ds.shuffle(10, seed=seed, reshuffle_each_iteration=reshuffle))
            == values(ns, ds.shuffle(10, seed=seed, reshuffle_each_iteration=reshuffle)))


for reshuffle in (True, False):
    for seed in (None, 42):
        tag = f"[reshuffle={reshuffle},seed={seed}]"
        add("testReshuffleRepeatEpochs" + tag,
            lambda ns, r=reshuffle, s=seed: _epochs_equal(ns, r, s), mode="value")
        add("testReshuffleIterationEpochs" + tag,
            lambda ns, r=reshuffle, s=seed: _iterations_equal(ns, r, s), mode="value")
        add("testReshuffleSeparateTransformations" + tag,
            lambda ns, r=reshuffle, s=seed: _separate_equal(ns, r, s), mode="value")

add("testShuffleV2ResourceCapture", lambda ns: (lambda ids: ns.Dataset.range(1).interleave(
    lambda _: ids))(ns.Dataset.range(10).shuffle(1)))
# The map fails (TF: a failed assert_equal), nothing is cached, the second epoch is empty.
add("testEmptyDataset", lambda ns: ns.Dataset.from_tensors(np.int64(1))
    .map(lambda x: ns.fail_if(x, 1)).cache().shuffle(buffer_size=10).repeat(), mode="resume")

for reshuffle in (True, False):
    for buffer_size in (1, 3, 5, 8, 10):
        SUITE.checkpoint(
            f"ShuffleCheckpointTest.test[reshuffle={reshuffle},buffer_size={buffer_size}]",
            lambda ns, r=reshuffle, b=buffer_size: ns.Dataset.range(5).shuffle(
                b, seed=55, reshuffle_each_iteration=r).repeat(2),
            derive=restored_matches)

SUITE.skip("testSeedZero", "graph-mode seed placeholder (Python 0 and tensor 0 seeds)")
SUITE.skip("testShuffleSeed (graph seeds)", "tf.random.set_seed graph-level seeds; the "
           "op-seed combinations are ported")
SUITE.skip("testShuffleV2InFunction", "iterating inside a tf.function (defun)")
SUITE.skip("testRerandomizeOnReplicate", "graph round trip of a dataset (dataset_to_graph)")
SUITE.skip("testCheckpointLargeShuffleBuffer", "tf.train.Checkpoint of a 512 MB shuffle "
           "buffer")
SUITE.skip("ShuffleCheckpointTest.testMultipleIterators", "TF1 graph-mode Saver over two "
           "one-shot iterators")
