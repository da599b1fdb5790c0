"""Seeded stages that reshuffle each iteration continue their epochs across iter(ds) calls,
as tf.data's seed generators do (feedline.core.seed_epochs)."""

import copy
import json
import pickle

import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.core.seed_epochs import EpochCounter, restored_epoch, start_epoch


def ints(ds):
    return [int(x) for x in ds]


# Every stage that draws anew each iteration, as (make, elements per epoch).
RESHUFFLING = {
    "shuffle": (lambda: fl.Dataset.range(8).shuffle(8, seed=1), 8),
    "global_shuffle": (lambda: fl.Dataset.range(8).global_shuffle(seed=1), 8),
    "sample_from_datasets": (lambda: fl.Dataset.sample_from_datasets(
        [fl.Dataset.range(4), fl.Dataset.range(10, 14)], seed=1,
        rerandomize_each_iteration=True), 8),
    "random": (lambda: fl.Dataset.random(seed=1, rerandomize_each_iteration=True).take(8), 8),
    "options_seed": (lambda: fl.Dataset.range(8).shuffle(8).with_options(fl.Options(seed=3)),
                     8),
}


@pytest.mark.parametrize("stage", sorted(RESHUFFLING))
def test_each_iter_of_one_dataset_is_the_next_epoch(stage):
    make, size = RESHUFFLING[stage]
    epochs = ints(make().repeat(4))
    ds = make()
    runs = [ints(ds) for _ in range(4)]
    assert [x for run in runs for x in run] == epochs
    assert len({tuple(run) for run in runs}) == 4
    # Another object of the same pipeline starts again at epoch 0: reruns reproduce.
    assert ints(make()) == epochs[:size]


@pytest.mark.parametrize("stage", sorted(RESHUFFLING))
def test_a_restored_state_is_exact_and_sets_the_next_epoch(stage):
    make, size = RESHUFFLING[stage]
    epochs = ints(make().repeat(3))
    ds = make()
    ints(ds)  # epoch 0
    it = iter(ds)  # epoch 1
    head = [int(next(it)) for _ in range(3)]
    state = json.loads(json.dumps(it.state_dict()))
    it.close()
    assert ints(ds) == epochs[2 * size:]  # epoch 2
    restored = iter(ds)
    restored.load_state_dict(state)
    assert head + ints(restored) == epochs[size:2 * size]
    assert ints(ds) == epochs[2 * size:]  # continues after the restored epoch 1


def test_pinned_runs_neither_read_nor_advance_the_counter():
    make, _ = RESHUFFLING["shuffle"]
    epochs = ints(make().repeat(2))
    ds = make().map(lambda x: x)
    assert ds.element_spec.dtype == np.int64  # spec read from a first element
    assert ints(fl.PipelineIterator(ds)) == epochs[:8]
    assert ints(fl.PipelineIterator(ds, epoch=1)) == epochs[8:]
    assert ints(ds) == epochs[:8]


def test_graph_rewrites_share_the_counter_and_copies_do_not():
    make, _ = RESHUFFLING["shuffle"]
    epochs = ints(make().repeat(3))
    ds = make()
    # Two maps fuse: the rewritten graph holds copies of the nodes, which share the counter.
    fused = ds.map(lambda x: x + 1).map(lambda x: x - 1)
    assert ints(fused) == epochs[:8] and ints(ds) == epochs[8:16]
    assert ints(pickle.loads(pickle.dumps(ds))) == epochs[:8]  # another object: epoch 0
    assert ints(copy.deepcopy(ds)) == epochs[:8]
    assert ints(ds) == epochs[16:]


def test_without_reshuffling_every_iterator_agrees():
    for ds in (fl.Dataset.range(8).shuffle(8, seed=1, reshuffle_each_iteration=False),
               fl.Dataset.range(8).global_shuffle(seed=1, reshuffle_each_iteration=False),
               fl.Dataset.random(seed=1).take(8),
               fl.Dataset.sample_from_datasets([fl.Dataset.range(4), fl.Dataset.range(9, 13)],
                                               seed=1)):
        assert ints(ds) == ints(ds)


def test_counter_rules():
    counter, node = EpochCounter(), object.__new__(type("Node", (), {}))
    run = IteratorContext(continue_epochs=True)
    assert [start_epoch(node, counter, run) for _ in range(3)] == [0, 1, 2]
    assert start_epoch(node, counter, IteratorContext(continue_epochs=True)) == 3
    # A pipeline that numbers its epochs keeps them, and leaves the counter.
    assert start_epoch(node, counter, IteratorContext(first_epoch=7)) == 7
    assert counter.next == 4
    # A later first epoch than the counter's wins.
    assert start_epoch(node, counter, IteratorContext(first_epoch=9, continue_epochs=True)) == 9
    assert counter.next == 10
    assert restored_epoch(node, counter, IteratorContext(continue_epochs=True), 2) == 2
    assert counter.next == 3
    assert restored_epoch(node, counter, IteratorContext(), 8) == 8 and counter.next == 3


@pytest.mark.parametrize("bad", [-1, 1.5, "1", None, True, [1]])
def test_a_damaged_epoch_is_a_checkpoint_error_and_never_reaches_the_counter(bad):
    counter, node = EpochCounter(), object.__new__(type("Node", (), {}))
    with pytest.raises(fl.CheckpointError, match="epoch"):
        restored_epoch(node, counter, IteratorContext(continue_epochs=True), bad)
    assert counter.next == 0
