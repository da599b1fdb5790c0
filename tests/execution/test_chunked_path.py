"""The chunked path of the order-defining stages (file readers, interleave, shuffle, batch):
elements, errors and checkpoints exactly those of the element-by-element path."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline.core.errors import DataLossError
from feedline.core.iterator import IteratorContext, chunk_reader
from feedline.testing import check_checkpointing, no_leaked_threads


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chunked")
    paths = []
    for f in range(5):
        path = str(folder / f"part-{f}.tfrecord")
        with fl.TFRecordWriter(path) as writer:
            for i in range(700 + 150 * f):  # files of different lengths: ends mid-cycle
                writer.write(f"{f}:{i}".encode() * (1 + i % 7))
        paths.append(path)
    return paths


def _one_by_one(dataset: fl.Dataset) -> list:
    it = dataset._make_iterator(IteratorContext())
    out = []
    try:
        while True:
            try:
                out.append(("element", next(it)))
            except StopIteration:
                return out
            except Exception as error:  # noqa: BLE001 - errors are items here
                out.append(("error", type(error).__name__))
    finally:
        it.close()


def _in_chunks(build, seed: int, restore_every: float = 0.0) -> list:
    """Reads with next_chunk of random sizes, restoring a fresh iterator from the state
    now and then (the state after a chunk must be the position after its last element)."""
    rng = random.Random(seed)
    it = build()._make_iterator(IteratorContext())
    out = []
    try:
        while True:
            try:
                chunk = it.next_chunk(rng.randint(1, 900))
            except StopIteration:
                return out
            except Exception as error:  # noqa: BLE001 - errors are items here
                out.append(("error", type(error).__name__))
                continue
            assert chunk
            out.extend(("element", e) for e in chunk)
            if rng.random() < restore_every:
                state = it.state_dict()
                it.close()
                it = build()._make_iterator(IteratorContext())
                it.load_state_dict(state)
    finally:
        it.close()


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        x[0] == y[0] and (np.array_equal(x[1], y[1]) if isinstance(x[1], np.ndarray)
                          else x[1] == y[1]) for x, y in zip(a, b))


PIPELINES = {
    "tfrecord": lambda f: fl.TFRecordDataset(f),
    "interleave": lambda f: fl.Dataset.from_tensor_slices(f).interleave(
        fl.TFRecordDataset, cycle_length=2),
    "parallel interleave": lambda f: fl.Dataset.from_tensor_slices(f).interleave(
        fl.TFRecordDataset, cycle_length=2, num_parallel_calls=fl.AUTOTUNE),
    "parallel interleave, blocks of 3": lambda f: fl.Dataset.from_tensor_slices(f).interleave(
        lambda p: fl.TFRecordDataset(p).take(401), cycle_length=3, block_length=3,
        num_parallel_calls=2),
    "shuffle": lambda f: fl.TFRecordDataset(f).shuffle(300, seed=4),
    "chess prefix": lambda f: fl.Dataset.from_tensor_slices(f).interleave(
        fl.TFRecordDataset, cycle_length=2, num_parallel_calls=fl.AUTOTUNE).shuffle(
        500, seed=1).batch(64, drop_remainder=True),
}


@pytest.mark.parametrize("name", PIPELINES)
def test_chunks_give_the_elements_one_by_one_does(files, name):
    build = lambda: PIPELINES[name](files)
    with no_leaked_threads():
        expected = _one_by_one(build())
        assert len(expected) > 70
        assert _same(_in_chunks(build, seed=1), expected)


@pytest.mark.parametrize("name", PIPELINES)
@pytest.mark.slow
def test_a_state_taken_after_a_chunk_restores_the_exact_continuation(files, name):
    build = lambda: PIPELINES[name](files)
    with no_leaked_threads():
        expected = _one_by_one(build())
        assert _same(_in_chunks(build, seed=2, restore_every=0.3), expected)


def test_the_order_defining_stages_read_in_chunks(files):
    ds = PIPELINES["chess prefix"](files)
    it = ds._make_iterator(IteratorContext())
    try:
        shuffle = it._upstream
        interleave = shuffle._upstream
        assert chunk_reader(shuffle) is not None and chunk_reader(interleave) is not None
        # A stage that moves one element at a time says so: callers pull one by one.
        assert chunk_reader(fl.Dataset.range(3)._make_iterator(IteratorContext())) is None
    finally:
        it.close()


def test_a_damaged_record_comes_in_its_place_after_the_records_before_it(tmp_path):
    path = str(tmp_path / "damaged.tfrecord")
    with fl.TFRecordWriter(path) as writer:
        for i in range(50):
            writer.write(b"record %03d" % i)
    data = bytearray(Path(path).read_bytes())
    record = 16 + len(b"record 000")
    data[20 * record + 12 + 3] ^= 0xFF  # record 20's data: its checksum no longer matches
    Path(path).write_bytes(bytes(data))
    it = fl.TFRecordDataset(path)._make_iterator(IteratorContext())
    try:
        records = []
        with pytest.raises(DataLossError, match="record index 20"):
            while True:
                records += it.next_chunk(100)
        assert records == [b"record %03d" % i for i in range(20)]
        with pytest.raises(StopIteration):  # a damaged record ends its file, as in tf.data
            it.next_chunk(100)
    finally:
        it.close()


def test_an_error_before_a_shuffle_is_raised_in_its_turn(files):
    def fail_at_300(x):
        if x == 300:
            raise ValueError("element 300")
        return x

    build = lambda: fl.Dataset.range(1000).map(fail_at_300).shuffle(64, seed=3)
    expected = _one_by_one(build())
    assert ("error", "ValueError") in expected
    assert _same(_in_chunks(build, seed=3), expected)


def test_batches_of_the_chunked_prefix_checkpoint_like_every_stage(files):
    ds = fl.Dataset.from_tensor_slices(files[:2]).interleave(
        fl.TFRecordDataset, cycle_length=2, num_parallel_calls=2).shuffle(
        200, seed=1).batch(100, drop_remainder=True)
    check_checkpointing(ds, epochs=1, steps=[0, 1, 5, 13])
