"""``multiprocess``: worker processes, sharding policies, merge order, checkpoints."""

from __future__ import annotations

import collections
import os
import warnings

import numpy as np
import pytest

import feedline as fl
from feedline.distribute.autoshard import plan_sharding, shard_pipeline
from feedline.testing import check_checkpointing

pytestmark = pytest.mark.timeout(120)

Pair = collections.namedtuple("Pair", "index square")


def _values(ds: fl.Dataset) -> list:
    return [x.tolist() if isinstance(x, np.ndarray) else x for x in ds]


def _flat(batches: list) -> list:
    return [x for batch in batches for x in batch]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _files(tmp_path, count: int, records: int) -> list[str]:
    paths = []
    for f in range(count):
        path = str(tmp_path / f"part-{f}.tfrecord")
        names = np.array([b"%d-%d" % (f, i) for i in range(records)], dtype=object)
        fl.write_tfrecord(fl.Dataset.from_tensor_slices(names), path)
        paths.append(path)
    return paths


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("drop_remainder", [False, True])
@pytest.mark.slow
def test_batch_policy_gives_the_single_process_output_for_any_worker_count(
        workers, drop_remainder):
    ds = fl.Dataset.range(23).map(lambda x: x * x).batch(4, drop_remainder=drop_remainder)
    parallel = ds.multiprocess(workers)
    assert parallel.sharding(workers).policy == "batch"
    assert _values(parallel) == _values(ds)


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.slow
def test_global_shuffle_gives_the_single_process_output_for_any_worker_count(tmp_path, workers):
    # Workers read their positions of the shuffled TFRecord files by index: no file is read
    # twice, and the merged batches are exactly those of one process.
    paths = _files(tmp_path, 3, 17)

    def make() -> fl.Dataset:  # each a first iteration (epoch 0) of its own objects
        return fl.TFRecordDataset(paths).global_shuffle(seed=4).map(lambda r: r + b"!") \
            .batch(5)

    parallel = make().multiprocess(workers)
    assert (parallel.sharding(workers).policy, parallel.sharding(workers).exact_order) == \
        ("index", True)
    assert _values(parallel) == _values(make())
    # Reshuffled epochs too.
    assert _values(make().multiprocess(workers).repeat(2)) == _values(make().repeat(2))
    # The epochs the workers ran count here: iterated again, the pipeline continues with
    # the next epochs, as one process iterating it twice would.
    ds = make()
    once, twice = _values(ds.multiprocess(workers)), _values(ds)
    single = make()
    assert (once, twice) == (_values(single), _values(single))
    assert once != twice


@pytest.mark.slow
def test_one_to_one_pipeline_keeps_its_order_and_structure():
    ds = fl.Dataset.range(9).map(lambda x: Pair(x, {"sq": x * x, "name": str(x)}))
    got = list(ds.multiprocess(2))
    assert [int(p.index) for p in got] == list(range(9))
    assert [p.square["name"] for p in got] == [str(i).encode() for i in range(9)]
    assert all(type(p) is Pair for p in got)


@pytest.mark.slow
def test_file_policy_reads_each_file_in_one_worker_and_merges_in_turn(tmp_path):
    files = _files(tmp_path, 5, 7)
    ds = fl.TFRecordDataset(files).batch(3)
    plan = ds.multiprocess(2).sharding()
    assert (plan.policy, plan.exact_order, plan.files) == ("file", False, 5)
    # Documented order: the shards' outputs interleaved one element at a time.
    expected = fl.Dataset.range(2).interleave(
        lambda i: shard_pipeline(ds, 2, int(i)), cycle_length=2)
    got = _values(ds.multiprocess(2))
    assert got == _values(expected)
    assert got[:2] == [[b"0-0", b"0-1", b"0-2"], [b"1-0", b"1-1", b"1-2"]]
    assert sorted(_flat(got)) == sorted(_flat(_values(ds)))


@pytest.mark.slow
def test_list_files_then_interleave_is_sharded_by_file(tmp_path):
    _files(tmp_path, 4, 3)
    ds = fl.Dataset.list_files(str(tmp_path / "*.tfrecord"), shuffle=False).interleave(
        fl.TFRecordDataset, cycle_length=2)
    assert plan_sharding(ds, 2).policy == "file"
    got = _values(ds.multiprocess(2))
    assert sorted(got) == sorted(_values(ds)) and len(got) == 12


@pytest.mark.slow
def test_fewer_files_than_workers_shards_records(tmp_path):
    files = _files(tmp_path, 1, 10)
    ds = fl.TFRecordDataset(files)
    plan = plan_sharding(ds, 3)
    assert (plan.policy, plan.exact_order) == ("data", True)
    assert _values(ds.multiprocess(3)) == _values(ds)


@pytest.mark.slow
def test_position_dependent_stage_runs_whole_pipeline_per_worker_and_warns():
    ds = fl.Dataset.range(10).map(lambda x: x + 1).take(7).enumerate()
    with pytest.warns(RuntimeWarning, match="exact but no faster"):
        got = _values(ds.multiprocess(2))
    assert got == _values(ds)


def test_unordered_merge_gives_every_element_once():
    ds = fl.Dataset.range(40).filter(lambda x: x % 3 != 0).batch(5)
    got = _values(ds.multiprocess(2, deterministic=False))
    assert sorted(_flat(got)) == [x for x in range(40) if x % 3 != 0]


@pytest.mark.slow
def test_large_batches_arrive_as_writable_shared_memory():
    ds = fl.Dataset.range(6).map(lambda x: np.full((256, 256), x, np.float32)).batch(2)
    batches = list(ds.multiprocess(2))
    assert [float(b[:, 0, 0].sum()) for b in batches] == [1.0, 5.0, 9.0]
    owner = batches[0]
    while isinstance(owner, np.ndarray):
        owner = owner.base
    import mmap

    assert isinstance(owner, memoryview) and isinstance(owner.obj, mmap.mmap)
    batches[0][0, 0, 0] = 42.0
    assert batches[0][0, 0, 0] == 42.0


@pytest.mark.slow
def test_errors_arrive_in_place_with_the_workers_traceback_and_iteration_goes_on():
    def check(x):
        if x in (3, 8):
            raise ValueError(f"bad element {x}")
        return x

    it = iter(fl.Dataset.range(10).map(check).multiprocess(2))
    outcomes = []
    for _ in range(10):
        try:
            outcomes.append(int(next(it)))
        except ValueError as error:
            notes = "\n".join(error.__notes__)
            assert "worker process" in notes and "in check" in notes
            outcomes.append(str(error))
    assert outcomes == [0, 1, 2, "bad element 3", 4, 5, 6, 7, "bad element 8", 9]
    with pytest.raises(StopIteration):
        next(it)
    it.close()


@pytest.mark.slow
def test_workers_persist_across_epochs_and_end_with_close():
    ds = fl.Dataset.range(16).shuffle(16, seed=3).batch(4).multiprocess(2)
    it = iter(ds.repeat(3))
    batches, pids_per_epoch = [], []
    for step in range(12):
        batches.append(next(it).tolist())
        if step % 4 == 0:
            pids_per_epoch.append(tuple(it._root._upstream.worker_pids))
    with pytest.raises(StopIteration):
        next(it)
    epochs = [_flat(batches[i:i + 4]) for i in (0, 4, 8)]
    for epoch in epochs:
        assert sorted(epoch) == list(range(16))
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2]  # reshuffled each epoch
    # The same two processes served every epoch.
    assert len(set(pids_per_epoch)) == 1 and None not in pids_per_epoch[0]
    assert all(_alive(pid) for pid in pids_per_epoch[0])
    it.close()
    assert not it._ctx.kept and not any(_alive(pid) for pid in pids_per_epoch[0])


@pytest.mark.slow
def test_reshuffling_per_epoch_matches_a_fresh_run():
    def make():
        return fl.Dataset.range(12).shuffle(12, seed=5).batch(3).multiprocess(2).repeat(2)

    ds = make()
    first = _values(ds)
    assert first == _values(make())
    # The next iter() of the same object goes on to the next epochs, as in one process.
    assert _values(ds) != first


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.slow
def test_checkpoints_restore_exactly(deterministic):
    ds = fl.Dataset.range(14).map(lambda x: x * 3).batch(3).multiprocess(
        2, deterministic=deterministic)
    # Each position starts two pipelines of 2 processes. The start and the end of the data
    # are among the positions of the two-epoch pass (0, 4, 5, 6, 9, 10): not restored twice.
    check_checkpointing(ds, steps=[1, 3], ordered=deterministic, epochs=2)


@pytest.mark.slow
def test_checkpoints_restore_files_and_shuffle_exactly(tmp_path):
    files = _files(tmp_path, 3, 5)
    ds = fl.TFRecordDataset(files).shuffle(4, seed=2).batch(2).multiprocess(2)
    # The start and the end: in the two-epoch pass (0, 7, 8, 9, 15, 16).
    check_checkpointing(ds, steps=[2, 5], epochs=2)


@pytest.mark.filterwarnings("ignore:feedline. this pipeline has a stage")
@pytest.mark.slow
def test_checkpoint_with_a_failing_element_restores_the_failure():
    from feedline.testing import fail_at

    ds = fail_at(fl.Dataset.range(12), [4]).batch(2).multiprocess(2)
    check_checkpointing(ds, steps=[1, 2, 4], epochs=1)


@pytest.mark.slow
def test_state_from_another_worker_count_is_refused_and_autotune_adopts_it():
    base = fl.Dataset.range(20).batch(2)
    it = iter(base.multiprocess(2))
    consumed = [next(it).tolist() for _ in range(3)]
    state = it.state_dict()
    rest = [b.tolist() for b in it]
    assert consumed + rest == _values(base)
    with pytest.raises(fl.CheckpointError, match="saved with 2 worker processes"):
        other = iter(base.multiprocess(3))
        try:
            other.load_state_dict(_reseal_for(state, base.multiprocess(3)))
        finally:
            other.close()
    auto = iter(base.multiprocess(fl.AUTOTUNE))
    auto.load_state_dict(_reseal_for(state, base.multiprocess(fl.AUTOTUNE)))
    assert [b.tolist() for b in auto] == rest


def _reseal_for(state: dict, dataset: fl.Dataset) -> dict:
    """The same positions, sealed for ``dataset`` (its fingerprint names its worker count)."""
    from feedline.core import pipeline_state
    from feedline.core.fingerprint import PipelineFingerprint

    return pipeline_state.seal(state["root"], PipelineFingerprint.of(dataset))


def test_a_file_cache_inside_is_refused():
    with pytest.raises(ValueError, match="written by every worker"):
        list(fl.Dataset.range(3).cache("/tmp/never-written").batch(1).multiprocess(2))


@pytest.mark.slow
def test_nested_multiprocess_is_a_clear_error():
    ds = fl.Dataset.range(4).batch(2).multiprocess(1).map(lambda b: b).multiprocess(1)
    with pytest.raises(RuntimeError, match="already runs in worker processes"):
        list(ds)


def test_argument_validation():
    with pytest.raises(ValueError):
        fl.Dataset.range(3).multiprocess(0)
    with pytest.raises(ValueError):
        fl.Dataset.range(3).multiprocess(2, buffer_size=0)


@pytest.mark.slow
def test_no_process_left_after_iteration_ends():
    it = iter(fl.Dataset.range(6).batch(2).multiprocess(2))
    assert len(list(it)) == 3
    pids = [p for p in it._root.worker_pids if p is not None] or \
        [p for pool in it._ctx.kept.values() for p in pool.pids() if p is not None]
    it.close()
    assert pids and not any(_alive(pid) for pid in pids)
    assert os.getpid() > 0


@pytest.mark.slow
def test_user_scripts_need_no_main_guard(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text(
        "import feedline as fl\n"
        "print([b.tolist() for b in fl.Dataset.range(6).map(lambda x: x + 1).batch(3)"
        ".multiprocess(2)])\n")
    with warnings.catch_warnings():
        result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                                timeout=60, cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[[1, 2, 3], [4, 5, 6]]"


@pytest.mark.slow
def test_a_worker_that_cannot_restore_its_position_ends_the_iteration_with_the_reason():
    ds = fl.Dataset.range(20).map(lambda x: x + 1).batch(2).multiprocess(2)
    it = iter(ds)
    next(it)
    state = it.state_dict()
    it.close()
    root = state["root"]
    root["workers"][1]["input"] = {"type": "not-a-stage", "version": 1}
    damaged = _reseal_for(state, ds)
    with iter(ds) as restored:
        restored.load_state_dict(damaged)
        with pytest.raises(fl.CheckpointError) as raised:
            while True:
                next(restored)
        assert "worker 1 cannot run its shard" in "\n".join(raised.value.__notes__)
        for _ in range(2):  # then raised again, never a silent end (issue 41.3)
            with pytest.raises(fl.WorkerProcessError) as again:
                next(restored)
            assert str(again.value).startswith("CheckpointError: ")
            assert again.value.worker == 1 and again.value.__cause__ is raised.value
            assert "worker 1 cannot run its shard" in "\n".join(again.value.__notes__)


@pytest.mark.slow
def test_stages_made_inside_interleave_do_not_pile_up_processes():
    ds = fl.Dataset.range(3).interleave(
        lambda i: fl.Dataset.range(4).map(lambda x: x + 10 * i).batch(2).multiprocess(1),
        cycle_length=1)
    with iter(ds) as it:
        got = [b.tolist() for b in it]
        assert len(it._ctx.kept) <= 1
    assert got == [[0, 1], [2, 3], [10, 11], [12, 13], [20, 21], [22, 23]]


@pytest.mark.slow
def test_element_timeout_does_not_count_the_workers_start():
    options = fl.Options(threading=fl.ThreadingOptions(element_timeout=0.05))
    ds = fl.Dataset.range(4).batch(2).multiprocess(2).with_options(options)
    with iter(ds) as it:  # starting a worker takes far longer than 0.05 s
        assert [b.tolist() for b in it] == [[0, 1], [2, 3]]
