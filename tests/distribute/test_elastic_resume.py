"""Elastic resume: a checkpoint of N replicas of a streaming pipeline, resumed on M.

Every test checks the one property that matters: over the whole epoch (before the checkpoint
on N replicas, after it on M), the multiset of delivered elements is one epoch exactly.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import feedline as fl
from feedline.core import pipeline_state
from feedline.core.fingerprint import PipelineFingerprint
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
    built: Callable[[int, int], fl.Dataset] | None = None
    """Builds the replicas instead (``distribute``): the shape above with no shard."""

    def replica(self, num_replicas: int, index: int) -> fl.Dataset:
        if self.built is not None:
            return self.built(num_replicas, index)
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
            if not last:  # the last replicas ran to the end: their states are not used
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
@pytest.mark.parametrize("policy", [fl.AutoShardPolicy.FILE, fl.AutoShardPolicy.DATA])
def test_replicas_built_by_distribute_resume_on_another_count(tfrecords, policy):
    options = fl.Options(distribute=fl.DistributeOptions(auto_shard_policy=policy))
    shape = Shape(tuple(tfrecords), sharding="none")

    def replica(n, i):
        context = fl.InputContext(num_input_pipelines=n, input_pipeline_id=i)
        return shape.replica(n, i).with_options(options).distribute(context)

    with no_leaked_threads():
        delivered = run_epoch(dataclasses.replace(shape, built=replica), [4, 2, 3],
                              [[1, 2, 0, 1], [2, 1]])
    assert _missing_and_extra(delivered, shape.epoch()) == ([], [])


@pytest.mark.timeout(60)
def test_padded_batches_of_sequences_resume_on_another_replica_count(tfrecords):
    def replica(n, i):
        return (fl.Dataset.from_tensor_slices(tfrecords).shard(n, i)
                .interleave(fl.TFRecordDataset, cycle_length=2).shuffle(8, seed=1)
                .map(_parse).map(_tokens).map(lambda x: x["t"]).padded_batch(3).prefetch(1))

    delivered: collections.Counter = collections.Counter()
    states = []
    with no_leaked_threads():
        for i in range(3):
            with iter(replica(3, i)) as it:
                for _ in range(i + 1):
                    delivered.update(v for v in next(it).ravel().tolist() if v)
                states.append(it.state_dict())
        for j, state in enumerate(fl.merge_states(states, 2, replica)):
            with iter(replica(2, j)) as it:
                it.load_state_dict(state)
                delivered.update(v for batch in it for v in batch.ravel().tolist() if v)
    expected = Packed(tuple(tfrecords)).epoch()  # every record's tokens, padding left out
    assert _missing_and_extra(delivered, expected) == ([], [])


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
@pytest.mark.parametrize("sharding", ["file", "data"])
def test_a_resumed_job_checkpointed_before_it_read_on_is_re_dealt_again(tfrecords, sharding):
    # The resumed replicas start reading the stream where the least advanced old one was:
    # positions between there and the old frontier that they do not own were read before,
    # and must stay out of the next re-deal.
    shape = Shape(tuple(tfrecords), sharding=sharding)
    with no_leaked_threads():
        delivered = run_epoch(shape, [3, 2, 2], [[2, 1, 3], [0, 0]])
    assert _missing_and_extra(delivered, shape.epoch()) == ([], [])


@pytest.mark.timeout(60)
def test_shuffle_buffers_are_dealt_in_turn(tfrecords):
    # A buffer larger than a replica's share: each read all its records (31 and 28) and
    # delivered 3, so everything left is in the two buffers (id 0 was filtered out).
    shape = Shape(tuple(tfrecords), buffer_size=40, cycle_length=4, keep_modulo=10**9)
    with no_leaked_threads():
        delivered, states = _checkpoint(shape, 2, 1)
    # The replicas hold their buffers by position; the merge deals the elements themselves.
    assert [len(_stage(s, "ShuffleIterator")["positions"]["numbers"]) for s in states] == [
        28, 25]
    assert [_stage(s, "ShuffleIterator")["buffer"] for s in states] == [[], []]
    merged = fl.merge_states(states, 4, shape.replica)
    assert [len(_stage(s, "ShuffleIterator")["buffer"]) for s in merged] == [14, 13, 13, 13]
    # Both had read the whole file list (10 names): nothing unread there.
    assert [_stage(s, "ShardIterator")["redeal"] for s in merged] == [
        {"extra": [], "tails": [[10 + j, 4]]} for j in range(4)]
    with no_leaked_threads():
        _finish(shape, merged, delivered)


@pytest.mark.timeout(60)
def test_merged_states_go_through_save_state_and_load_state(tfrecords, tmp_path):
    shape = Shape(tuple(tfrecords), buffer_size=8)
    with no_leaked_threads():
        delivered, states = _checkpoint(shape, 3, 2)
        paths = []
        for i, state in enumerate(states):  # each replica saves its own
            paths.append(tmp_path / f"replica-{i}.state")
            fl.save_state(paths[-1], state)
        merged = fl.merge_states([fl.load_state(path) for path in paths], 2, shape.replica)
        for j, state in enumerate(merged):
            fl.save_state(tmp_path / f"resumed-{j}.state", state)
        _finish(shape, [fl.load_state(tmp_path / f"resumed-{j}.state") for j in range(2)],
                delivered)


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
    assert [(s["position"], s["redeal"]) for s in shards] == [
        (3, {"extra": [4], "tails": [[6 + j, 4]]}) if j == 0 else
        (3, {"extra": [], "tails": [[6 + j, 4]]}) for j in range(4)]
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
    with pytest.raises(fl.CheckpointError, match="different pipeline"):
        fl.merge_states(states[::-1], 2, shape.replica)  # replica 1's state given as replica 0
    # Replica 1's state claiming replica 0's files too (what no job writes).
    root = json.loads(json.dumps(states[1]["root"]))
    _stage_state(root, "ShardIterator")["redeal"] = {"extra": [], "tails": [[0, 1]]}
    overlapping = pipeline_state.seal(root, PipelineFingerprint.of(shape.replica(2, 1)))
    with pytest.raises(fl.CheckpointError, match="not one checkpoint of every replica of one "
                       r"job: their shards' shares overlap"):
        fl.merge_states([states[0], overlapping], 3, shape.replica)


def test_merge_states_checks_its_arguments(tfrecords):
    shape = Shape(tuple(tfrecords))
    with pytest.raises(ValueError, match=r"num_replicas\) must be an int >= 1, got 0"):
        fl.merge_states([{}], 0, shape.replica)
    with pytest.raises(ValueError, match="needs the state of every replica, got none"):
        fl.merge_states([], 2, shape.replica)
    with pytest.raises(TypeError, match=r"must be a function \(num_replicas, index\)"):
        fl.merge_states([{}], 2, shape.replica(1, 0))


def test_ownership_owns_listed_positions_and_progressions_and_refuses_damage():
    owner = Ownership((1, 5), ((8, 3), (9, 4)))
    assert [p for p in range(18) if owner.owns(p)] == [1, 5, 8, 9, 11, 13, 14, 17]
    assert owner.unread(6) == ([], [(8, 3), (9, 4)])
    assert owner.unread(10) == ([], [(11, 3), (13, 4)])
    assert Ownership.stride(4, 1) == Ownership((), ((1, 4),))
    assert Ownership.from_state(owner.to_state()) == owner
    for damaged in ({"extra": [-1], "tails": []},
                    {"extra": [], "tails": [[0, 0]]},
                    {"extra": [3, 1], "tails": []},
                    {"extra": [], "tails": [[1]]},
                    {"tails": []}):
        with pytest.raises(fl.CheckpointError, match="damaged state for the shard stage"):
            Ownership.from_state(damaged)


def test_a_re_dealt_shard_state_round_trips_and_a_plain_one_keeps_its_layout():
    with iter(fl.Dataset.range(10).shard(2, 1)) as it:
        assert next(it) == 1
        plain = it.state_dict()
    assert sorted(plain["root"]) == ["input", "position", "type", "version"]
    owner = Ownership((2,), ((4, 3),))
    redealt = dict(plain, root=dict(plain["root"], redeal=owner.to_state()))
    ds = fl.Dataset.range(10).shard(2, 1)
    sealed = pipeline_state.seal(redealt["root"], PipelineFingerprint.of(ds))
    with iter(ds) as it:
        it.load_state_dict(sealed)
        assert it.state_dict()["root"]["redeal"] == owner.to_state()
        assert [int(x) for x in it] == [2, 4, 7]
    with iter(ds) as it:  # a plain state after a re-dealt one: the stride again
        it.load_state_dict(sealed)
        it.load_state_dict(plain)
        assert [int(x) for x in it] == [3, 5, 7, 9]


# ------------------------------------------------------------------ property test
replica_counts = st.integers(1, 8)
steps_per_replica = st.one_of(st.just(0), st.integers(0, 6))
"""Batches a replica delivers before a checkpoint; often none (a resumed replica that
checkpoints again before reading on)."""


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
    steps = [draw(st.lists(steps_per_replica, min_size=n, max_size=n)) for n in counts[:-1]]
    return shape, counts, steps


def _check_random_epoch(case) -> None:
    shape, counts, steps = case
    delivered = run_epoch(shape, counts, steps)
    assert _missing_and_extra(delivered, shape.epoch()) == ([], []), case


@pytest.mark.timeout(120)
def test_random_pipelines_checkpoints_and_replica_counts_deliver_one_epoch(tfrecords):
    @settings(max_examples=100, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(epochs(tfrecords))
    def check(case):
        _check_random_epoch(case)

    with no_leaked_threads():
        check()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_random_epochs_many_trials(tfrecords):
    _many_trials(tfrecords, "epochs", 1200)


# ------------------------------------------------------------------ mixtures and packing
def _source(files: list[str], n: int, i: int, buffer_size: int, seed: int) -> fl.Dataset:
    ds = (fl.Dataset.from_tensor_slices(files).shard(n, i)
          .interleave(fl.TFRecordDataset, cycle_length=2))
    return ds.shuffle(buffer_size, seed=seed).map(Parse())


@dataclasses.dataclass(frozen=True)
class Mixture:
    """Three weighted sources (their own files, each sharded), mixed, then batched."""

    groups: tuple[tuple[str, ...], ...]
    weights: tuple[float, ...] = (0.5, 0.3, 0.2)
    buffer_size: int = 4
    batch_size: int = 3
    rerandomize: bool = False
    prefetch: bool = True

    def replica(self, num_replicas: int, index: int) -> fl.Dataset:
        sources = [_source(list(g), num_replicas, index, self.buffer_size, seed=k)
                   for k, g in enumerate(self.groups)]
        ds = (fl.Dataset.sample_from_datasets(sources, list(self.weights), seed=5,
                                              rerandomize_each_iteration=self.rerandomize)
              .batch(self.batch_size))
        return ds.prefetch(2) if self.prefetch else ds

    def epoch(self) -> collections.Counter:
        return Shape(tuple(f for g in self.groups for f in g), keep_modulo=None).epoch()


def _mixture(tfrecords: list[str], **kwargs) -> Mixture:
    return Mixture((tuple(tfrecords[0:4]), tuple(tfrecords[4:8]), tuple(tfrecords[8:10])),
                   **kwargs)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("counts", "steps"), [
    ([3, 2], [[2, 1, 3]]), ([2, 5], [[1, 2]]), ([4, 1, 3], [[1, 0, 2, 1], [2]])])
def test_a_weighted_mixture_delivers_each_source_remainder_once(tfrecords, counts, steps):
    mixture = _mixture(tfrecords, rerandomize=True)
    with no_leaked_threads():
        delivered = run_epoch(mixture, counts, steps)
    assert _missing_and_extra(delivered, mixture.epoch()) == ([], [])


@pytest.mark.timeout(60)
def test_a_source_that_ended_on_every_replica_stays_ended(tfrecords):
    # Source 2 (files 8 and 9, 12 records) is drawn first until it runs out on both replicas.
    mixture = _mixture(tfrecords, weights=(0.0001, 0.0001, 0.9998))
    with no_leaked_threads():
        delivered, states = _checkpoint(mixture, 2, 5)
    assert {8000, 8003, 9000, 9007} <= set(delivered)  # (states are snapshots: the prefetch's)
    merged = fl.merge_states(states, 3, mixture.replica)
    assert [_stage(s, "SampleIterator")["inputs"][2] for s in merged] == [None] * 3
    with no_leaked_threads():
        _finish(mixture, merged, delivered)


@pytest.mark.timeout(60)
def test_a_source_that_ended_on_some_replicas_only_is_dealt_whole(tfrecords):
    # Replica 0's share of source 2 (file 8: 4 records) ends first; replica 1's (file 9: 8)
    # is still being read. Where that stream ends is in no state, so replica 1's unread
    # progression of it goes whole to one new replica.
    mixture = _mixture(tfrecords, weights=(0.0001, 0.0001, 0.9998))
    with no_leaked_threads():
        delivered, states = _checkpoint(mixture, 2, 2)
    assert {8000, 8001, 8002, 8003} <= set(delivered)
    assert len([i for i in delivered if i // 1000 == 9]) < 8
    merged = fl.merge_states(states, 3, mixture.replica)
    sources = [_stage(s, "SampleIterator")["inputs"][2] for s in merged]
    assert [_stage_state(s, "ShardIterator")["redeal"]["tails"] for s in sources] == [
        [[3, 2]], [], []]
    with no_leaked_threads():
        _finish(mixture, merged, delivered)


@pytest.mark.timeout(60)
def test_mixtures_that_cannot_continue_exactly_are_refused(tfrecords):
    def stopping(n, i):
        return fl.Dataset.sample_from_datasets(
            [_source(tfrecords[:5], n, i, 2, 0), _source(tfrecords[5:], n, i, 2, 1)],
            seed=1, stop_on_empty_dataset=True).batch(2)

    with pytest.raises(fl.CheckpointError, match="stop_on_empty_dataset=True ends the epoch"):
        fl.merge_states(_states_after_one_batch(stopping, 2), 3, stopping)

    def chosen(n, i):
        choice = fl.Dataset.range(2).repeat(100)
        return fl.Dataset.choose_from_datasets(
            [_source(tfrecords[:5], n, i, 2, 0), _source(tfrecords[5:], n, i, 2, 1)],
            choice).batch(2)

    with pytest.raises(fl.CheckpointError, match=r"cannot re-deal the .*ChooseFromDatasets"):
        fl.merge_states(_states_after_one_batch(chosen, 2), 3, chosen)


def _tokens(record_id: np.int64) -> dict[str, np.ndarray]:
    # 1 to 11 tokens, each the record's id + 1 (0 is the padding value).
    return {"t": np.full(1 + int(record_id) % 11, record_id + 1, np.int64)}


@dataclasses.dataclass(frozen=True)
class Packed:
    """Sequences from the files, shuffled, packed into rows of 8 tokens, two rows a batch."""

    files: tuple[str, ...]
    method: str = "first_fit"
    num_bins: int = 3
    sharding: str = "file"

    def replica(self, num_replicas: int, index: int) -> fl.Dataset:
        ds = fl.Dataset.from_tensor_slices(list(self.files))
        if self.sharding == "file":
            ds = ds.shard(num_replicas, index)
        ds = ds.interleave(fl.TFRecordDataset, cycle_length=2)
        if self.sharding == "data":
            ds = ds.shard(num_replicas, index)
        return (ds.shuffle(5, seed=2).map(_parse).map(_tokens)
                .pack_sequences(8, method=self.method, num_bins=self.num_bins)
                .batch(2).prefetch(1))

    def epoch(self) -> collections.Counter:
        ids = Shape(self.files, keep_modulo=None).epoch()
        return collections.Counter({i + 1: n * (1 + i % 11) for i, n in ids.items()})


def run_packed_epoch(packed: Packed, counts: list[int], steps: list[list[int]]):
    """The multiset of tokens delivered (padding left out) over one epoch, as run_epoch."""
    tokens: collections.Counter = collections.Counter()
    states = None
    for stage, n in enumerate(counts):
        iterators = [iter(packed.replica(n, i)) for i in range(n)]
        try:
            if states is not None:
                for it, state in zip(iterators, fl.merge_states(states, n, packed.replica)):
                    it.load_state_dict(state)
            for i, it in enumerate(iterators):
                for _ in range(10**9 if stage == len(counts) - 1 else steps[stage][i]):
                    try:
                        rows = next(it)
                    except StopIteration:
                        break
                    tokens.update(rows["t"][rows["t_segment_ids"] > 0].tolist())
            if stage < len(counts) - 1:  # the last replicas' states are not used
                states = [it.state_dict() for it in iterators]
        finally:
            for it in iterators:
                it.close()
    return tokens


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["first_fit", "concat_and_split"])
@pytest.mark.parametrize("sharding", ["file", "data"])
def test_packed_rows_deliver_every_token_once_across_a_re_deal(tfrecords, method, sharding):
    packed = Packed(tuple(tfrecords), method=method, sharding=sharding)
    with no_leaked_threads():
        tokens = run_packed_epoch(packed, [3, 2, 5], [[2, 1, 3], [1, 4]])
    assert _missing_and_extra(tokens, packed.epoch()) == ([], [])


@st.composite
def mixture_epochs(draw, files: list[str]):
    order = draw(st.permutations(files))
    cuts = sorted(draw(st.lists(st.integers(1, len(files) - 1), min_size=2, max_size=2,
                                unique=True)))
    groups = (tuple(order[:cuts[0]]), tuple(order[cuts[0]:cuts[1]]), tuple(order[cuts[1]:]))
    weights = tuple(draw(st.sampled_from([0.1, 0.3, 0.6])) for _ in range(3))
    mixture = Mixture(groups, weights=weights, buffer_size=draw(st.sampled_from([1, 4, 16])),
                      batch_size=draw(st.integers(1, 4)), rerandomize=draw(st.booleans()),
                      prefetch=draw(st.booleans()))
    counts = draw(st.lists(replica_counts, min_size=2, max_size=3))
    steps = [draw(st.lists(steps_per_replica, min_size=n, max_size=n)) for n in counts[:-1]]
    return mixture, counts, steps


@st.composite
def packed_epochs(draw, files: list[str]):
    packed = Packed(tuple(draw(st.permutations(files))[:draw(st.integers(1, len(files)))]),
                    method=draw(st.sampled_from(["first_fit", "concat_and_split"])),
                    num_bins=draw(st.integers(1, 4)),
                    sharding=draw(st.sampled_from(["file", "data"])))
    counts = draw(st.lists(replica_counts, min_size=2, max_size=3))
    steps = [draw(st.lists(steps_per_replica, min_size=n, max_size=n)) for n in counts[:-1]]
    return packed, counts, steps


def _check_mixture(case) -> None:
    mixture, counts, steps = case
    delivered = run_epoch(mixture, counts, steps)
    assert _missing_and_extra(delivered, mixture.epoch()) == ([], []), case


def _check_packed(case) -> None:
    packed, counts, steps = case
    tokens = run_packed_epoch(packed, counts, steps)
    assert _missing_and_extra(tokens, packed.epoch()) == ([], []), case


@pytest.mark.timeout(120)
@pytest.mark.parametrize("which", ["mixture", "packed"])
def test_random_mixtures_and_packings_deliver_one_epoch(tfrecords, which):
    strategy, check_case = _random_cases(tfrecords, which)

    @settings(max_examples=30, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(strategy)
    def check(case):
        check_case(case)

    with no_leaked_threads():
        check()


def _random_cases(files: list[str], which: str):
    if which == "epochs":
        return epochs(files), _check_random_epoch
    return ((mixture_epochs(files), _check_mixture) if which == "mixture"
            else (packed_epochs(files), _check_packed))


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("which", ["mixture", "packed"])
def test_random_mixtures_and_packings_many_trials(tfrecords, which):
    _many_trials(tfrecords, which, 1000)


def run_trials(files: list[str], which: str, trials: int, run_seed: int) -> None:
    """``trials`` random cases of ``which`` (hypothesis, seeded: the same cases every run),
    each checked for one epoch exactly; a failure raises with its falsifying case."""
    strategy, check_case = _random_cases(files, which)

    @seed(run_seed)
    @settings(max_examples=trials, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(strategy)
    def check(case):
        check_case(case)

    with no_leaked_threads():
        check()


def _many_trials(files: list[str], which: str, trials: int) -> None:
    """``trials`` random cases in all, in two seeded halves run side by side: one here, one
    in a worker process (the trials are CPU-bound Python, so a thread would not help)."""
    half = trials // 2
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        other = pool.submit(run_trials, files, which, trials - half, 2)
        run_trials(files, which, half, 1)
        other.result()
