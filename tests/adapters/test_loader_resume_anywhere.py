"""The torch and jax loaders resume safely and on any replica count (issue 44).

A loader given a state reads nothing before it has loaded it (no element from the start of
the epoch, with threads or worker processes); a loop begun before ``load_state_dict`` is
refused; one replica's state of another replica count is refused, and the states of every
replica go through ``Loader.merge_states`` instead: over the epoch, every element once.
"""

from __future__ import annotations

import collections
import json
import time

import numpy as np
import psutil
import pytest

torch = pytest.importorskip("torch")

import feedline as fl
import feedline.torch as flt
from feedline.adapters.epochs import EpochFeeder, merge_loader_states
from feedline.testing.threads import no_leaked_threads

pytestmark = pytest.mark.timeout(120)

FILE_SIZES = (5, 0, 9, 3, 12, 7, 1, 10, 4, 8)
FILE_SHARDS = fl.AutoShardPolicy.FILE


def parse(record: bytes) -> np.int64:
    file, number = record.split(b":")
    return np.int64(int(file) * 1000 + int(number))


class LogCalls:
    """The identity, appending each element it sees to a file (worker processes too)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, x):
        with open(self.path, "a") as file:
            file.write(f"{int(x)}\n")
        return x

    def seen(self) -> list[int]:
        with open(self.path) as file:
            return [int(line) for line in file.read().split()]


@pytest.fixture(scope="module")
def tfrecords(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("loader_elastic")
    files = []
    for f, size in enumerate(FILE_SIZES):
        path = str(folder / f"part-{f}.tfrecord")
        fl.write_tfrecord(fl.Dataset.from_tensor_slices(
            [f"{f}:{r}".encode() for r in range(size)] or [b""]).take(size), path)
        files.append(path)
    return files


def one_epoch() -> collections.Counter:
    return collections.Counter(f * 1000 + r for f, size in enumerate(FILE_SIZES)
                               for r in range(size))


def pipeline(files: list[str]) -> fl.Dataset:
    """The tf.data default shape, cut by FILE: files, interleave, shuffle, map, batch."""
    return (fl.Dataset.from_tensor_slices(files)
            .interleave(fl.TFRecordDataset, cycle_length=2, num_parallel_calls=2)
            .shuffle(6, seed=3).map(parse, num_parallel_calls=2).batch(3).prefetch(2))


def values(batch) -> list[int]:
    return [int(v) for v in np.asarray(batch).reshape(-1)]


def torch_loader(ds, n, i, state=None):
    return flt.Loader(ds, policy=FILE_SHARDS, state=state,
                      context=fl.InputContext(num_input_pipelines=n, input_pipeline_id=i))


def checkpoint(loaders, steps) -> tuple[collections.Counter, list[dict]]:
    """``steps[i]`` batches of loader ``i`` received, then every loader's state (as JSON)."""
    delivered: collections.Counter = collections.Counter()
    for loader, count in zip(loaders, steps):
        it = iter(loader)
        for _ in range(count):
            delivered.update(values(next(it)))
        it.close()  # the loop stops: the epoch goes on at the next loop
    return delivered, [json.loads(json.dumps(loader.state_dict())) for loader in loaders]


def rest_of_epoch(loaders) -> collections.Counter:
    delivered: collections.Counter = collections.Counter()
    for loader in loaders:
        for batch in loader:
            delivered.update(values(batch))
    return delivered


# ----------------------------------------------------------------- the safe order
def test_a_loader_built_from_a_state_reads_nothing_before_it(tmp_path):
    log = LogCalls(str(tmp_path / "threads.log"))
    ds = fl.Dataset.range(60).map(log, num_parallel_calls=2).prefetch(4).batch(2).prefetch(2)
    with no_leaked_threads():
        with flt.Loader(ds) as first:
            it = iter(first)
            head = [values(next(it)) for _ in range(10)]
            state = first.state_dict()
            it.close()
        open(log.path, "w").close()
        with flt.Loader(ds, state=state) as restored:
            time.sleep(0.2)  # a thread started by the constructor would have read by now
            assert log.seen() == []
            rest = [values(b) for b in restored]
        assert 0 not in log.seen() and 1 not in log.seen()
    assert head[0] == [0, 1] and rest[0] == [20, 21] and len(rest) == 20


@pytest.mark.slow
def test_a_loader_in_worker_processes_loads_its_state_before_they_read(tmp_path):
    log = LogCalls(str(tmp_path / "processes.log"))
    records = str(tmp_path / "rows.tfrecord")
    fl.write_tfrecord(fl.Dataset.from_tensor_slices([str(i).encode() for i in range(40)]),
                      records)
    processes = fl.Options(autotune=fl.AutotuneOptions(processes=True))
    ds = (fl.TFRecordDataset(records).map(log).batch(2).prefetch(fl.AUTOTUNE)
          .with_options(processes))

    def share(context):  # as is: distribute would read it by index, in this process
        return ds
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    with flt.Loader(share) as first:
        it = iter(first)
        head = [values(next(it)) for _ in range(5)]
        state = first.state_dict()
        it.close()
    open(log.path, "w").close()
    with flt.Loader(share, state=state) as restored:
        assert log.seen() == []
        it = iter(restored)
        assert values(next(it)) == [10, 11]
        assert restored._feeder._iterator.process_decision.mode == "processes"
        workers = {p.pid for p in psutil.Process().children(recursive=True)} - children_before
        rest = [values(b) for b in it]
    assert workers, "the pipeline was to run in worker processes"
    assert psutil.wait_procs([psutil.Process(pid) for pid in workers if psutil.pid_exists(pid)],
                             timeout=30)[1] == []
    assert head[0] == [0, 1] and rest[-1] == [38, 39]
    assert min(log.seen()) >= 2  # a restore re-reads a little, never from row 0


def test_a_loop_begun_before_load_state_dict_is_refused():
    ds = fl.Dataset.range(20).shuffle(5, seed=1).batch(2)
    feeder = EpochFeeder(ds)
    loads = feeder.loads
    feeder.load_state_dict(EpochFeeder(ds).state_dict())
    with pytest.raises(RuntimeError, match="start a new loop"):
        feeder.ensure_current(loads)
    with flt.Loader(ds) as loader:
        it = iter(loader)
        next(it)
        state = loader.state_dict()
        stale = iter(loader)
        next(stale)  # the loop goes on from the state...
        loader.load_state_dict(state)  # ...until a state is loaded under it
        with pytest.raises(RuntimeError, match="start a new loop"):
            next(stale)
        again = flt.Loader(ds, state=state)
        assert [values(b) for b in loader] == [values(b) for b in again]
        again.close()


# ------------------------------------------------------------- other replica counts
def test_one_replicas_state_of_another_count_is_refused_naming_the_re_deal(tfrecords):
    ds = pipeline(tfrecords)
    loaders = [torch_loader(ds, 4, i) for i in range(4)]
    _, states = checkpoint(loaders, [1, 2, 0, 3])
    assert all(state["in_flight"] is None for state in states)  # nothing kept as data
    with pytest.raises(fl.CheckpointError, match=r"cannot resume on 2 .*Loader.merge_states"):
        torch_loader(ds, 2, 0, states[0])
    for loader in loaders:
        loader.close()
    # Read by index, with a shuffle buffer per replica after the shard: the state of one
    # replica, loaded alone, would lose what the other replicas' buffers held.
    buffered = fl.Dataset.range(40).shuffle(5, seed=1).batch(2)
    loaders = [flt.Loader(buffered, context=fl.InputContext(4, i, 4),
                          policy=fl.AutoShardPolicy.DATA) for i in range(4)]
    _, states = checkpoint(loaders, [1, 1, 1, 1])
    for loader in loaders:
        loader.close()
    two = flt.Loader(buffered, context=fl.InputContext(2, 0, 2), policy=fl.AutoShardPolicy.DATA)
    with pytest.raises(fl.CheckpointError, match=r"cannot resume on 2 .*Loader.merge_states"):
        two.load_state_dict(states[0])
    with pytest.raises(fl.CheckpointError, match="cannot re-deal the index shard"):
        flt.Loader.merge_states(states, 2, buffered, policy=fl.AutoShardPolicy.DATA)


@pytest.mark.parametrize("resumed", [2, 3])
def test_torch_loaders_on_4_file_sharded_replicas_resume_on_another_count(tfrecords, resumed):
    ds = pipeline(tfrecords)
    with no_leaked_threads():
        loaders = [torch_loader(ds, 4, i) for i in range(4)]
        delivered, states = checkpoint(loaders, [1, 2, 0, 3])
        for loader in loaders:
            loader.close()
        merged = flt.Loader.merge_states(states, resumed, ds, policy=FILE_SHARDS)
        assert [(s["input_pipelines"], s["epoch"], s["steps"]) for s in merged] == \
            [(resumed, 0, 3)] * resumed
        loaders = [torch_loader(ds, resumed, j, json.loads(json.dumps(state)))
                   for j, state in enumerate(merged)]
        assert [loader.step for loader in loaders] == [3] * resumed
        delivered += rest_of_epoch(loaders)
        assert [loader.epoch for loader in loaders] == [1] * resumed
        for loader in loaders:
            loader.close()
    assert delivered == one_epoch()


def test_a_re_dealt_job_checkpoints_and_is_re_dealt_again(tfrecords):
    ds = pipeline(tfrecords)
    with no_leaked_threads():
        loaders = [torch_loader(ds, 4, i) for i in range(4)]
        delivered, states = checkpoint(loaders, [2, 0, 1, 1])
        for count, steps in ((3, [1, 2, 0]), (2, None)):
            for loader in loaders:
                loader.close()
            merged = flt.Loader.merge_states(states, count, ds, policy=FILE_SHARDS)
            loaders = [torch_loader(ds, count, j, state) for j, state in enumerate(merged)]
            if steps is not None:
                more, states = checkpoint(loaders, steps)
                delivered += more
        delivered += rest_of_epoch(loaders)
        for loader in loaders:
            loader.close()
    assert delivered == one_epoch()


def test_batches_in_flight_are_dealt_to_the_resumed_replicas(tfrecords):
    """Pulled ahead and not handed out, they are kept as data and dealt in turn."""
    ds = pipeline(tfrecords)
    shares = [ds.distribute(fl.InputContext(4, i), FILE_SHARDS) for i in range(4)]
    delivered: collections.Counter = collections.Counter()
    feeders = [EpochFeeder(share, 4) for share in shares]
    for feeder, taken in zip(feeders, [1, 2, 0, 1]):
        feeder.start()
        for _ in range(taken):
            delivered.update(values(feeder.pull()))
            feeder.handed_out()
        for _ in range(2):
            try:
                feeder.pull()  # in flight: the training loop never got it
            except StopIteration:
                break
    states = [json.loads(json.dumps(feeder.state_dict())) for feeder in feeders]
    for feeder in feeders:
        feeder.close()
    assert sum(len(json.dumps(s["in_flight"])) > 4 for s in states) == 4

    def share(n, i):
        return ds.distribute(fl.InputContext(n, i), FILE_SHARDS)

    merged = merge_loader_states(states, 3, share)
    assert [s["in_flight"] is not None for s in merged] == [True] * 3
    for j, state in enumerate(merged):
        feeder = EpochFeeder(share(3, j), 3)
        feeder.load_state_dict(state)
        feeder.start()
        while True:
            try:
                delivered.update(values(feeder.pull()))
            except StopIteration:
                break
            feeder.handed_out()
        feeder.close()
    assert delivered == one_epoch()


def test_jax_loaders_on_4_replicas_resume_on_2_with_transfers_in_flight(tfrecords):
    pytest.importorskip("jax")
    import feedline.jax as flj

    ds = pipeline(tfrecords)

    def loader(n, i, state=None):
        return flj.Loader(ds, policy=FILE_SHARDS, prefetch_to_device=2, state=state,
                          context=fl.InputContext(n, i, n))

    with no_leaked_threads():
        loaders = [loader(4, i) for i in range(4)]
        delivered, states = checkpoint(loaders, [1, 2, 1, 3])
        for old in loaders:
            old.close()
        assert any(state["in_flight"] is not None for state in states)
        merged = flj.Loader.merge_states(states, 2, ds, policy=FILE_SHARDS,
                                         devices_per_process=1)
        loaders = [loader(2, j, state) for j, state in enumerate(merged)]
        delivered += rest_of_epoch(loaders)
        for new in loaders:
            new.close()
    assert delivered == one_epoch()


def test_states_that_are_not_one_checkpoint_are_refused(tfrecords):
    ds = pipeline(tfrecords)
    loaders = [torch_loader(ds, 2, i) for i in range(2)]
    _, states = checkpoint(loaders, [1, 1])
    for loader in loaders:
        loader.close()
    with pytest.raises(fl.CheckpointError, match="different epochs"):
        flt.Loader.merge_states([states[0], {**states[1], "epoch": 1}], 3, ds,
                                policy=FILE_SHARDS)
    with pytest.raises(fl.CheckpointError, match="input pipelines, not one of these 3"):
        flt.Loader.merge_states([*states, states[0]], 2, ds, policy=FILE_SHARDS)
    with pytest.raises(fl.CheckpointError, match="not a feedline loader state"):
        flt.Loader.merge_states([states[0], {"epoch": 0}], 2, ds, policy=FILE_SHARDS)
    with pytest.raises(ValueError, match="num_replicas"):
        flt.Loader.merge_states(states, 0, ds, policy=FILE_SHARDS)


def test_a_pipeline_read_by_index_keeps_one_state_for_any_count():
    # 12 batches: 4 read on 2 replicas, 8 left, full rounds of 4 (index shards read only
    # full rounds, so every replica takes as many steps).
    ds = fl.Dataset.range(48).global_shuffle(seed=2).batch(4)
    loaders = [flt.Loader(ds, context=fl.InputContext(2, i, 2)) for i in range(2)]
    delivered, states = checkpoint(loaders, [2, 2])
    for loader in loaders:
        loader.close()
    merged = flt.Loader.merge_states(states, 4, ds)
    assert [s["pipeline"] for s in merged] == [states[0]["pipeline"]] * 4
    loaders = [flt.Loader(ds, context=fl.InputContext(4, j, 4), state=state)
               for j, state in enumerate(merged)]
    delivered += rest_of_epoch(loaders)
    assert delivered == collections.Counter(range(48))
    with pytest.raises(fl.CheckpointError, match="different positions"):
        flt.Loader.merge_states([states[0], merged[0] | {"input_pipelines": 2,
                                                          "pipeline": None}], 3, ds)

