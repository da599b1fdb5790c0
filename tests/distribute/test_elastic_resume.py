"""Elastic resume: a checkpoint of N replicas of a streaming pipeline, resumed on M.

Every test checks the one property that matters: over the whole epoch (before the checkpoint
on N replicas, after it on M), the multiset of delivered elements is one epoch exactly.
"""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import feedline as fl
from feedline.optimize import optimize
from feedline.testing.threads import no_leaked_threads
from feedline.transforms.shard import Ownership

FILE_SIZES = (5, 0, 9, 3, 12, 7, 1, 10, 4, 8)
"""Records per file: some empty, some longer than any cycle's block."""


def _record_id(file: int, record: int) -> int:
    return file * 1000 + record


def _parse(record: bytes) -> int:
    file, number = record.split(b":")
    return _record_id(int(file), int(number))


class Parse:
    """``_parse`` with a batch form: ``map(Parse()).batch(n)`` runs fused (map_and_batch)."""

    def __call__(self, record: bytes) -> np.int64:
        return np.int64(_parse(record))

    def feedline_batch_form(self, records) -> np.ndarray:
        return np.array([_parse(r) for r in records], dtype=np.int64)


@pytest.fixture(scope="module")
def tfrecords(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("elastic")
    files = []
    for f, size in enumerate(FILE_SIZES):
        path = str(folder / f"part-{f}.tfrecord")
        fl.write_tfrecord(fl.Dataset.from_tensor_slices(
            [f"{f}:{r}".encode() for r in range(size)] or [b""]).take(size), path)
        files.append(path)
    return files


@pytest.fixture(scope="module")
def text_files(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("elastic_text")
    files = []
    for f, size in enumerate(FILE_SIZES):
        path = folder / f"part-{f}.txt"
        path.write_text("".join(f"{f}:{r}\n" for r in range(size)))
        files.append(str(path))
    return files


@dataclasses.dataclass(frozen=True)
class Shape:
    """One pipeline of the tf.data default shape:
    files -> (FILE shard) -> interleave -> (DATA shard) -> shuffle -> map -> filter -> batch."""

    files: tuple[str, ...]
    sharding: str = "file"
    reader: str = "tfrecord"
    cycle_length: int = 2
    block_length: int = 1
    interleave_parallel: bool = False
    buffer_size: int | None = 6
    map_parallel: bool = False
    keep_modulo: int | None = 3
    """Keep the records whose id is not a multiple of it; ``None``: no filter (``map`` then
    ``batch``, which the optimizer fuses into ``map_and_batch``)."""
    batch_size: int = 3
    prefetch: bool = True

    def replica(self, num_replicas: int, index: int) -> fl.Dataset:
        ds = fl.Dataset.from_tensor_slices(list(self.files))
        if self.sharding == "file":
            ds = ds.shard(num_replicas, index)
        read = fl.TFRecordDataset if self.reader == "tfrecord" else fl.TextLineDataset
        ds = ds.interleave(read, cycle_length=self.cycle_length, block_length=self.block_length,
                           num_parallel_calls=2 if self.interleave_parallel else None)
        if self.sharding == "data":
            ds = ds.shard(num_replicas, index)
        if self.buffer_size is not None:
            ds = ds.shuffle(self.buffer_size, seed=11)
        ds = ds.map(Parse(), num_parallel_calls=2 if self.map_parallel else None)
        modulo = self.keep_modulo
        if modulo is not None:
            ds = ds.filter(lambda x: x % modulo != 0)
        ds = ds.batch(self.batch_size)
        return ds.prefetch(2) if self.prefetch else ds

    def epoch(self) -> collections.Counter:
        numbers = [int(Path(path).stem.split("-")[1]) for path in self.files]
        ids = (_record_id(f, r) for f in numbers for r in range(FILE_SIZES[f]))
        return collections.Counter(i for i in ids
                                   if self.keep_modulo is None or i % self.keep_modulo != 0)


def run_epoch(shape: Shape, counts: list[int], steps: list[list[int]]) -> collections.Counter:
    """Run one epoch on ``counts[0]`` replicas, checkpointing after ``steps[k][i]`` more batches
    of replica ``i`` and resuming on ``counts[k + 1]`` replicas; the last count runs to the
    end. Returns the multiset of delivered elements."""
    delivered: collections.Counter = collections.Counter()
    states = None
    for stage, n in enumerate(counts):
        iterators = [iter(shape.replica(n, i)) for i in range(n)]
        try:
            if states is not None:
                for iterator, state in zip(iterators, fl.merge_states(states, n, shape.replica)):
                    iterator.load_state_dict(state)
            last = stage == len(counts) - 1
            for i, iterator in enumerate(iterators):
                for _ in range(10**9 if last else steps[stage][i]):
                    try:
                        delivered.update(next(iterator).tolist())
                    except StopIteration:
                        break
            states = [iterator.state_dict() for iterator in iterators]
        finally:
            for iterator in iterators:
                iterator.close()
    return delivered


def _missing_and_extra(delivered: collections.Counter, expected: collections.Counter) -> tuple:
    return (sorted((expected - delivered).elements()), sorted((delivered - expected).elements()))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sharding", ["file", "data"])
@pytest.mark.parametrize(("counts", "steps"), [
    ([4, 2], [[1, 2, 0, 3]]),
    ([4, 8], [[2, 2, 2, 2]]),
    ([2, 1], [[3, 1]]),
    ([1, 3], [[4]]),
    ([3, 3], [[1, 0, 2]]),
])
def test_tfrecord_pipeline_resumes_on_another_replica_count(tfrecords, sharding, counts, steps):
    shape = Shape(tuple(tfrecords), sharding=sharding, interleave_parallel=True,
                  map_parallel=True)
    with no_leaked_threads():
        delivered = run_epoch(shape, counts, steps)
    assert _missing_and_extra(delivered, shape.epoch()) == ([], [])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("map_parallel", [False, True])
def test_a_fused_map_and_batch_resumes_on_another_replica_count(tfrecords, map_parallel):
    shape = Shape(tuple(tfrecords), keep_modulo=None, map_parallel=map_parallel)
    assert ".map_and_batch(" in repr(optimize(shape.replica(3, 0), fl.Options()))
    with no_leaked_threads():
        delivered = run_epoch(shape, [3, 2], [[2, 1, 3]])
    assert _missing_and_extra(delivered, shape.epoch()) == ([], [])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sharding", ["file", "data"])
def test_text_lines_resume_on_another_replica_count(text_files, sharding):
    shape = Shape(tuple(text_files), sharding=sharding, reader="text", buffer_size=20,
                  cycle_length=3, block_length=2)
    with no_leaked_threads():
        delivered = run_epoch(shape, [3, 5], [[2, 1, 3]])
    assert _missing_and_extra(delivered, shape.epoch()) == ([], [])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("sharding", ["file", "data"])
def test_a_resumed_job_checkpoints_and_is_re_dealt_again(tfrecords, sharding):
    shape = Shape(tuple(tfrecords), sharding=sharding, buffer_size=10)
    with no_leaked_threads():
        delivered = run_epoch(shape, [4, 3, 6, 1], [[1, 2, 0, 1], [1, 1, 2], [0, 1, 1, 0, 2, 1]])
    assert _missing_and_extra(delivered, shape.epoch()) == ([], [])


def _checkpoint(shape: Shape, n: int, batches: int) -> tuple[collections.Counter, list[dict]]:
    delivered: collections.Counter = collections.Counter()
    states = []
    for i in range(n):
        with iter(shape.replica(n, i)) as it:
            for _ in range(batches):
                delivered.update(next(it).tolist())
            states.append(it.state_dict())
    return delivered, states


def _finish(shape: Shape, states: list[dict], delivered: collections.Counter) -> None:
    for j, state in enumerate(states):
        with iter(shape.replica(len(states), j)) as it:
            it.load_state_dict(state)
            delivered.update(v for batch in it for v in batch.tolist())
    assert _missing_and_extra(delivered, shape.epoch()) == ([], [])


@pytest.mark.timeout(60)
def test_shuffle_buffers_are_dealt_in_turn(tfrecords):
    # A buffer larger than a replica's share: each read all its records (31 and 28) and
    # delivered 3, so everything left is in the two buffers (id 0 was filtered out).
    shape = Shape(tuple(tfrecords), buffer_size=40, cycle_length=4, keep_modulo=10**9)
    with no_leaked_threads():
        delivered, states = _checkpoint(shape, 2, 1)
    assert [len(_stage(s, "ShuffleIterator")["buffer"]) for s in states] == [28, 25]
    merged = fl.merge_states(states, 4, shape.replica)
    assert [len(_stage(s, "ShuffleIterator")["buffer"]) for s in merged] == [14, 13, 13, 13]
    assert [_stage(s, "ShardIterator")["redeal"] for s in merged] == [
        {"extra": [], "tail_start": 10, "tail_step": 4, "tail_index": j} for j in range(4)]
    with no_leaked_threads():
        _finish(shape, merged, delivered)


@pytest.mark.timeout(60)
def test_open_files_and_unread_files_are_re_dealt(tfrecords):
    shape = Shape(tuple(tfrecords), buffer_size=2, cycle_length=2, keep_modulo=10**9,
                  prefetch=False)
    with no_leaked_threads():
        delivered, states = _checkpoint(shape, 2, 1)
    # Replica 0 (files 0, 2, 4, ...) read records 0:0-0:2 and 2:0-2:1, delivered 2:0, 2:1 and
    # 0:1 (0:0 is filtered out) and holds 0:2; replica 1 has files 3 and 5 open (1 is empty).
    assert sorted(delivered) == [1, 2000, 2001, 3000, 5000, 5001]
    merged = fl.merge_states(states, 4, shape.replica)
    futures = [[(Path(f["inner"]["input"]["path"]).stem, f["inner"]["input"]["position"]
                 ["record_index"]) for f in _stage(s, "interleave")["futures"]] for s in merged]
    assert futures == [[("part-0", 3)], [("part-2", 2)], [("part-5", 2)], [("part-3", 2)]]
    assert [len(_stage(s, "ShuffleIterator")["buffer"]) for s in merged] == [1, 1, 0, 0]
    # Unread files: 4 (replica 0 had read the list to position 3, replica 1 to 6), then from
    # position 6 on, one in four each.
    shards = [_stage(s, "ShardIterator") for s in merged]
    assert [(s["position"], s["redeal"]["extra"], s["redeal"]["tail_start"]) for s in shards] \
        == [(3, [4], 6), (3, [], 6), (3, [], 6), (3, [], 6)]
    with no_leaked_threads():
        _finish(shape, merged, delivered)


def _stage(sealed: dict, kind: str) -> dict:
    return _stage_state(sealed["root"], kind)


def _stage_state(state: dict, kind: str) -> dict:
    while state["type"] != kind:
        state = state["input"]
    return state


@pytest.mark.timeout(60)
def test_a_stage_that_cannot_be_re_dealt_is_refused_by_name(tfrecords):
    def replica(n, i):
        return (fl.Dataset.from_tensor_slices(tfrecords).shard(n, i)
                .interleave(fl.TFRecordDataset).take(5).batch(2))

    states = _states_after_one_batch(replica, 2)
    with pytest.raises(fl.CheckpointError,
                       match=r"cannot re-deal the take \(TakeDataset\) stage: it is not one"):
        fl.merge_states(states, 3, replica)


def _states_after_one_batch(replica, n: int) -> list[dict]:
    states = []
    for i in range(n):
        with iter(replica(n, i)) as it:
            next(it)
            states.append(it.state_dict())
    return states


@pytest.mark.timeout(60)
def test_a_pipeline_without_a_shard_is_refused(tfrecords):
    def replica(n, i):
        return fl.Dataset.from_tensor_slices(tfrecords).interleave(fl.TFRecordDataset).batch(2)

    with pytest.raises(fl.CheckpointError, match=r"no shard stage .*for one replica, shard\(1, 0\)"):
        fl.merge_states(_states_after_one_batch(replica, 1), 2, replica)


@pytest.mark.timeout(60)
def test_states_that_are_not_one_checkpoint_of_every_replica_are_refused(tfrecords):
    shape = Shape(tuple(tfrecords))
    states = _states_after_one_batch(shape.replica, 2)
    merged = fl.merge_states(states, 3, shape.replica)
    # Replica 2's state from a job that started on 3 replicas, the others' from the resume.
    fresh = _states_after_one_batch(shape.replica, 3)[2]
    with pytest.raises(fl.CheckpointError, match="not one checkpoint of every replica"):
        fl.merge_states([merged[0], merged[1], fresh], 2, shape.replica)
    with pytest.raises(fl.CheckpointError, match="different pipeline"):
        fl.merge_states(states[::-1], 2, shape.replica)  # replica 1's state given as replica 0


def test_merge_states_checks_its_arguments(tfrecords):
    shape = Shape(tuple(tfrecords))
    with pytest.raises(ValueError, match=r"num_replicas\) must be an int >= 1, got 0"):
        fl.merge_states([{}], 0, shape.replica)
    with pytest.raises(ValueError, match="needs the state of every replica, got none"):
        fl.merge_states([], 2, shape.replica)
    with pytest.raises(TypeError, match=r"must be a function \(num_replicas, index\)"):
        fl.merge_states([{}], 2, shape.replica(1, 0))


def test_ownership_splits_positions_and_refuses_damaged_re_deals():
    shares = [Ownership((1, 5) if j == 0 else (), 8, 3, j) for j in range(3)]
    assert [[p for p in range(16) if s.owns(p)] for s in shares] == [
        [1, 5, 8, 11, 14], [9, 12, 15], [10, 13]]
    assert shares[0].remaining(2, 12) == [5, 8, 11]
    assert Ownership.from_state(shares[0].to_state()) == shares[0]
    for damaged in ({"extra": [9], "tail_start": 8, "tail_step": 3, "tail_index": 0},
                    {"extra": [], "tail_start": 0, "tail_step": 2, "tail_index": 2},
                    {"extra": [3, 1], "tail_start": 8, "tail_step": 2, "tail_index": 0},
                    {"tail_start": 0}):
        with pytest.raises(fl.CheckpointError, match="damaged state for the shard stage"):
            Ownership.from_state(damaged)


def test_a_re_dealt_shard_state_round_trips_and_a_plain_one_keeps_its_layout():
    with iter(fl.Dataset.range(10).shard(2, 1)) as it:
        assert next(it) == 1
        plain = it.state_dict()
    assert sorted(plain["root"]) == ["input", "position", "type", "version"]
    redealt = dict(plain, root=dict(plain["root"], redeal=Ownership((2,), 4, 3, 0).to_state()))
    from feedline.core import pipeline_state
    from feedline.core.fingerprint import PipelineFingerprint

    ds = fl.Dataset.range(10).shard(2, 1)
    sealed = pipeline_state.seal(redealt["root"], PipelineFingerprint.of(ds))
    with iter(ds) as it:
        it.load_state_dict(sealed)
        assert it.state_dict()["root"]["redeal"] == Ownership((2,), 4, 3, 0).to_state()
        assert [int(x) for x in it] == [2, 4, 7]
    with iter(ds) as it:  # a plain state after a re-dealt one: the stride again
        it.load_state_dict(sealed)
        it.load_state_dict(plain)
        assert [int(x) for x in it] == [3, 5, 7, 9]


# ------------------------------------------------------------------ property test
replica_counts = st.integers(1, 8)


@st.composite
def epochs(draw, files: list[str]):
    shape = Shape(
        tuple(draw(st.permutations(files))[:draw(st.integers(1, len(files)))]),
        sharding=draw(st.sampled_from(["file", "data"])),
        cycle_length=draw(st.integers(1, 4)),
        block_length=draw(st.integers(1, 3)),
        interleave_parallel=draw(st.booleans()),
        buffer_size=draw(st.sampled_from([None, 1, 2, 5, 16, 64])),
        map_parallel=draw(st.booleans()),
        keep_modulo=draw(st.sampled_from([None, 2, 3, 7])),
        batch_size=draw(st.integers(1, 5)),
        prefetch=draw(st.booleans()))
    counts = draw(st.lists(replica_counts, min_size=2, max_size=3))
    steps = [draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)) for n in counts[:-1]]
    return shape, counts, steps


def _check_random_epoch(case) -> None:
    shape, counts, steps = case
    delivered = run_epoch(shape, counts, steps)
    assert _missing_and_extra(delivered, shape.epoch()) == ([], []), case


@pytest.mark.timeout(120)
def test_random_pipelines_checkpoints_and_replica_counts_deliver_one_epoch(tfrecords):
    @settings(max_examples=400, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(epochs(tfrecords))
    def check(case):
        _check_random_epoch(case)

    with no_leaked_threads():
        check()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_random_epochs_many_trials(tfrecords):
    @settings(max_examples=1200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(epochs(tfrecords))
    def check(case):
        _check_random_epoch(case)

    with no_leaked_threads():
        check()
