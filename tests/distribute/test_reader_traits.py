"""distribute asks an operation's traits what kind of reader it is: an operation outside
feedline that declares ``reader="function"`` is sharded as ``interleave`` is, by its records."""

from __future__ import annotations

import numpy as np

import feedline as fl
from feedline.core.dataset import Dataset
from feedline.core.options import AutoShardPolicy
from feedline.core.traits import READER_OF_NAMES, OperationTraits
from feedline.distribute.distribute import distribute
from feedline.formats.text import TextLineDataset


class _ThreeRecordsPerName(Dataset):
    """Opens each name its input gives (here: makes three records of it), as a reader would."""

    TRAITS = READER_OF_NAMES

    def __init__(self, names: Dataset) -> None:
        super().__init__([names])

    def _make_iterator(self, ctx):
        return self._inputs[0].flat_map(
            lambda name: Dataset.from_tensor_slices([name + b"0", name + b"1", name + b"2"])
        )._make_iterator(ctx)


def _names() -> Dataset:
    return fl.Dataset.from_tensor_slices(np.array([b"a", b"b", b"c", b"d"], dtype=object))


def test_a_reader_declared_by_its_traits_is_sharded_by_its_records_under_data():
    ctx = fl.InputContext(num_input_pipelines=2, input_pipeline_id=0)
    share = distribute(_ThreeRecordsPerName(_names()), ctx, AutoShardPolicy.DATA)

    # Every other record of the whole output, as for interleave, not the records of every
    # other name (index sharding of the names would drop whole files).
    assert [bytes(x) for x in share] == [b"a0", b"a2", b"b1", b"c0", b"c2", b"d1"]


def test_the_shares_of_a_declared_reader_match_those_of_interleave():
    ctx = fl.InputContext(num_input_pipelines=2, input_pipeline_id=1)
    declared = distribute(_ThreeRecordsPerName(_names()), ctx, AutoShardPolicy.DATA)
    builtin = distribute(_names().interleave(
        lambda name: Dataset.from_tensor_slices([name + b"0", name + b"1", name + b"2"]),
        cycle_length=1), ctx, AutoShardPolicy.DATA)

    assert [bytes(x) for x in declared] == [bytes(x) for x in builtin]


def test_reader_kinds():
    names = _names()
    assert TextLineDataset(["x.txt"]).traits().reader == "files"
    assert TextLineDataset(names).traits() == OperationTraits(
        "independent", opens_files=True, reader="files")
    assert names.interleave(TextLineDataset).traits().reader == "function"
    assert names.flat_map(TextLineDataset).traits().reader == "function"
    assert names.map(lambda x: x).traits().reader is None
