"""Which maps a worker runs each in a process of its own (``isolate_map_functions``): every
map whose function pickles, except those under a stage whose traits keep its input as written
(it reads that input by index)."""

from __future__ import annotations

from dataclasses import replace

import feedline as fl
from feedline.core.traits import ONE_TO_ONE
from feedline.core.unary import UnaryDataset
from feedline.distribute.index_shard import IndexShardDataset
from feedline.placement.worker_loop import isolate_map_functions


class _KeepsInput(UnaryDataset):
    """Passes its input through; says it keeps that input as written by its traits alone."""

    TRAITS = replace(ONE_TO_ONE, keeps_input_as_written=True)

    def _make_iterator(self, ctx):
        return self._inputs[0]._make_iterator(ctx)


def test_a_map_under_an_index_shard_stays_as_written():
    below = fl.Dataset.range(6).map(abs)
    shard = IndexShardDataset(below, 2, 0, num_parallel_calls=None)

    isolated, originals, count = isolate_map_functions(shard.map(abs))

    assert count == 1
    assert isolated.executor == "process" and isolated._inputs[0] is shard
    assert list(originals) == [isolated]
    assert originals[isolated]._inputs[0] is shard


def test_a_stage_that_declares_the_trait_keeps_its_input():
    below = fl.Dataset.range(3).map(abs)
    keeps = _KeepsInput(below)

    isolated, originals, count = isolate_map_functions(keeps)

    assert (isolated, originals, count) == (keeps, {}, 0)


def test_a_map_under_a_plain_stage_is_isolated():
    below = fl.Dataset.range(3).map(abs)

    isolated, _, count = isolate_map_functions(below.prefetch(1))

    assert count == 1
    assert isolated._inputs[0].executor == "process"
