"""Index shards: equal shares read by index, and checkpoints that resume on any shard count."""

import json

import numpy as np
import pytest

import feedline as fl
from feedline.distribute.index_shard import IndexShardDataset
from feedline.testing import check_checkpointing
from feedline.testing.threads import no_leaked_threads


def ints(ds):
    # A dataset is read at its first epoch, as by a replica in a process of its own: in this
    # one process the shares use one global_shuffle object, whose iter() would go on to its
    # next epochs (as tf.data's seed generators do).
    return [int(x) for x in (fl.PipelineIterator(ds) if isinstance(ds, fl.Dataset) else ds)]


def shuffled(n=103, seed=5):
    return fl.Dataset.range(n).global_shuffle(seed=seed).map(lambda x: x * 1)


@pytest.mark.parametrize("workers", [None, 1, 3])
def test_equal_disjoint_shares_in_full_rounds(workers):
    source = shuffled()
    order = ints(source)
    shares = [ints(IndexShardDataset(source, 4, j, num_parallel_calls=workers))
              for j in range(4)]
    assert [len(s) for s in shares] == [25] * 4
    assert [s for s in shares] == [order[j:100:4] for j in range(4)]
    assert len(IndexShardDataset(source, 4, 0)) == 25


def test_reads_only_its_own_elements():
    reads = []
    source = fl.Dataset.range(40).map(lambda x: reads.append(int(x)) or x)
    assert ints(IndexShardDataset(source, 8, 3, num_parallel_calls=None)) == [3, 11, 19, 27, 35]
    assert sorted(reads) == [3, 11, 19, 27, 35]


def take_each(iterators, count):
    return [int(next(it)) for it in iterators for _ in range(count)]


@pytest.mark.parametrize("before, after", [(4, 3), (2, 5), (3, 3), (5, 1)])
def test_elastic_resume_yields_each_element_once(before, after):
    source = shuffled()
    iterators = [fl.PipelineIterator(IndexShardDataset(source, before, j))
                 for j in range(before)]
    seen = take_each(iterators, 7)
    states = [json.loads(json.dumps(it.state_dict())) for it in iterators]
    for it in iterators:
        it.close()
    # One global position: every replica's checkpoint is the same.
    assert all(state["root"] == states[0]["root"] for state in states)
    position = 7 * before
    for j in range(after):
        with iter(IndexShardDataset(source, after, j)) as it:
            it.load_state_dict(states[j % before])
            seen += ints(it)
    full_rounds_left = (103 - position) // after * after
    assert len(seen) == position + full_rounds_left
    assert len(set(seen)) == len(seen)
    assert set(seen) <= set(range(103))


def test_elastic_resume_on_tfrecord_files(tmp_path):
    paths = []
    for f in range(3):
        paths.append(str(tmp_path / f"{f}.tfrecord"))
        fl.write_tfrecord(fl.Dataset.from_tensor_slices([f"{f}-{i}".encode() for i in range(10)]),
                          paths[-1])
    source = fl.TFRecordDataset(paths).global_shuffle(seed=1)
    iterators = [fl.PipelineIterator(IndexShardDataset(source, 2, j)) for j in range(2)]
    seen = [next(it) for it in iterators for _ in range(4)]
    state = iterators[1].state_dict()
    for it in iterators:
        it.close()
    for j in range(3):
        with iter(IndexShardDataset(source, 3, j)) as it:
            it.load_state_dict(state)
            seen += list(it)
    assert len(seen) == 8 + 21 and len(set(seen)) == len(seen)


def test_next_epoch_reshuffles_and_starts_over():
    source = fl.Dataset.range(20).global_shuffle(seed=2)
    epochs = ints(IndexShardDataset(source, 2, 1).repeat(2))
    first, second = epochs[:10], epochs[10:]
    order = ints(source.repeat(2))
    assert first == order[1:20:2] and second == order[21:40:2]
    assert first != second


def test_errors_come_in_place_and_the_shard_goes_on():
    def fail_at_5(x):
        if x == 5:
            raise ValueError("element 5 is bad")
        return x

    source = fl.Dataset.range(12).map(fail_at_5, name="check")
    with iter(IndexShardDataset(source, 2, 1, num_parallel_calls=2)) as it:
        assert [int(next(it)) for _ in range(2)] == [1, 3]
        with pytest.raises(ValueError, match="element 5 is bad") as raised:
            next(it)
        assert "feedline: raised in check at input element 5" in raised.value.__notes__
        assert ints(it) == [7, 9, 11]


def test_checkpoints():
    check_checkpointing(IndexShardDataset(shuffled(23), 3, 2), constant_state_size=True,
                        variants=[IndexShardDataset(shuffled(23), 3, 2, num_parallel_calls=None)])


def test_threads_end_on_close():
    source = fl.Dataset.range(1000).map(lambda x: np.full(10, x))
    with no_leaked_threads():
        it = iter(IndexShardDataset(source, 2, 0, num_parallel_calls=4))
        next(it)
        it.close()


def test_validation():
    with pytest.raises(TypeError, match="index shard needs random access"):
        IndexShardDataset(fl.Dataset.range(5).filter(bool), 2, 0)
    with pytest.raises(ValueError, match="index must be in"):
        IndexShardDataset(fl.Dataset.range(5), 2, 2)
    with pytest.raises(ValueError, match="num_shards must be >= 1"):
        IndexShardDataset(fl.Dataset.range(5), 0, 0)
