import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.testing import check_checkpointing, fail_at


def ints(ds):
    return [int(x) for x in ds]


@pytest.mark.parametrize("num_shards, index, expected", [
    (3, 0, [0, 3, 6, 9]), (3, 1, [1, 4, 7]), (3, 2, [2, 5, 8]), (1, 0, list(range(10))),
    (20, 9, [9]), (20, 15, []),
])
def test_shard_values(num_shards, index, expected):
    ds = fl.Dataset.range(10).shard(num_shards, index)
    assert ints(ds) == expected
    assert ds.cardinality() == len(expected)


def test_shards_partition_the_input():
    parts = [ints(fl.Dataset.range(17).shard(4, i)) for i in range(4)]
    assert sorted(x for part in parts for x in part) == list(range(17))


@pytest.mark.parametrize("num_shards, index", [(3, 3), (3, -1), (2, 5)])
def test_shard_index_out_of_range(num_shards, index):
    with pytest.raises(ValueError, match=r"shard\(index\) must be in \[0, num_shards\)"):
        fl.Dataset.range(10).shard(num_shards, index)


@pytest.mark.parametrize("num_shards", [0, -2])
def test_shard_needs_a_shard(num_shards):
    with pytest.raises(ValueError, match=r"shard\(num_shards\) must be >= 1"):
        fl.Dataset.range(10).shard(num_shards, 0)


def test_shard_rejects_non_ints():
    with pytest.raises(TypeError):
        fl.Dataset.range(10).shard(2.0, 0)


def test_shard_cardinality():
    assert fl.Dataset.range(0).shard(3, 1).cardinality() == 0
    assert fl.Dataset.range(3).repeat().shard(3, 1).cardinality() == fl.INFINITE
    assert fl.Dataset.range(3).filter(lambda x: True).shard(3, 1).cardinality() == fl.UNKNOWN


def test_failing_element_keeps_its_position():
    def fail_on_2(x):
        if x == 2:
            raise ValueError("bad")
        return x

    it = fl.Dataset.range(8).map(fail_on_2).shard(2, 0)._make_iterator(IteratorContext())
    assert int(next(it)) == 0
    with pytest.raises(ValueError):
        next(it)
    assert ints(it) == [4, 6]


def test_shard_of_infinite_input():
    assert ints(fl.Dataset.range(3).repeat().shard(2, 1).take(4)) == [1, 0, 2, 1]


@pytest.mark.parametrize("index", [0, 2])
def test_shard_checkpointing(index):
    check_checkpointing(fl.Dataset.range(10).shard(3, index))


@pytest.mark.parametrize("index", [0, 2])
def test_checkpointing_restores_failing_elements_in_place(index):
    check_checkpointing(fail_at(fl.Dataset.range(11), [2, 3, 7]).shard(3, index), constant_state_size=True)
