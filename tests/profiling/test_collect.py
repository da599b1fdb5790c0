"""Statistics collection: exact counts, transparency of the probes, threads that end."""

from __future__ import annotations

import itertools
import json
import threading
import time
import weakref

import numpy as np
import pytest

import feedline as fl
from feedline.profiling import collect
from feedline.testing.checkpoint import check_checkpointing
from feedline.testing.threads import no_leaked_threads

STATS = fl.Options(profiling=fl.ProfilingOptions(statistics=True))
# Statistics describe the pipeline as it runs, after rewrites: tests that name stages turn
# the rewrites that merge or replace stages (fusion, vectorization) off.
PLAIN = STATS.merge(fl.Options(optimization=fl.OptimizationOptions(
    map_fusion=False, map_vectorization=False)))


@pytest.fixture(params=["c", "python"])
def probe_kind(request, monkeypatch):
    """Every test runs with the compiled probe and with the Python one."""
    if request.param == "c":
        if collect._CProbe is None:
            pytest.skip("the C probe is not built here")
    else:
        monkeypatch.setattr(collect, "_CProbe", None)
    return request.param


def _stats(ds: fl.Dataset, consume=None, options: fl.Options = STATS):
    with iter(ds.with_options(options)) as it:
        for element in it:
            if consume is not None:
                consume(element)
        return it.statistics()


def _by_name(stats) -> dict[str, object]:
    return {stage.name: stage for stage in stats.stages}


def test_elements_of_every_stage_are_exact(probe_kind):
    ds = (fl.Dataset.from_tensor_slices(np.arange(100)).filter(lambda x: x % 3 != 0)
          .map(lambda x: x * 2, name="double").batch(7))
    stats = _stats(ds, options=PLAIN)
    stages = _by_name(stats)
    filter_name = "filter(test_elements_of_every_stage_are_exact.<locals>.<lambda>)"
    assert [s.name for s in stats.stages] == ["batch", "double", filter_name, "tensor_slices"]
    assert stages["tensor_slices"].elements == 100
    assert stages[filter_name].elements == 66
    assert stages["double"].elements == 66
    assert stages["batch"].elements == 10  # 9 batches of 7 and one of 3
    assert stats.elements == 10 and stats.consumer.calls == 10
    assert [s.parent for s in stats.stages] == [None, 0, 1, 2]
    assert stages["double"].operation == "map" and stages["batch"].operation == "batch"
    fused = _stats(ds)
    assert [s.name for s in fused.stages] == [
        "batch", "filter(test_elements_of_every_stage_are_exact.<locals>.<lambda>) -> double",
        "tensor_slices"]
    assert [s.elements for s in fused.stages] == [10, 66, 100]


def test_statistics_off_builds_no_probe_and_says_how_to_turn_them_on():
    with iter(fl.Dataset.range(3).map(lambda x: x)) as it:
        assert not collect.is_probe(it._root)
        assert list(it) == [0, 1, 2]
        with pytest.raises(RuntimeError, match="ProfilingOptions\\(statistics=True\\)"):
            it.statistics()


def test_bytes_are_element_sizes_times_elements(probe_kind):
    ds = fl.Dataset.range(50).map(lambda i: np.full(256, i, np.float32), name="fill")
    stages = _by_name(_stats(ds, options=PLAIN))
    assert stages["fill"].bytes == 50 * 256 * 4


def test_probes_keep_no_element_once_handed_out(probe_kind):
    # Holding a sampled element a while (a 38 MB batch of images) made every later batch
    # fault in fresh pages: 12% slower with statistics on. The probe sizes it and lets go.
    alive = []

    def make(i):
        array = np.full(1024, i, np.float32)
        alive.append(weakref.ref(array))
        return array

    ds = fl.Dataset.range(300).map(make, name="make").batch(10)
    with iter(ds.with_options(PLAIN)) as it:
        for _ in it:
            pass
        assert sum(ref() is not None for ref in alive) == 0
        stages = _by_name(it.statistics())
    assert stages["make"].bytes == 300 * 1024 * 4
    assert stages["batch"].bytes == 30 * 10 * 1024 * 4


def test_probe_counts_the_sizes_it_measured(probe_kind):
    # Slow calls are all timed: the first call and the first 8 timed after it are sized,
    # then one timed call in 64.
    def slow_bytes():
        for n in range(1, 201):
            time.sleep(collect.SLOW_NS * 2e-9)
            yield b"a" * n

    probe = collect.make_probe(slow_bytes(), sizer=len)
    assert len(list(probe)) == 200
    counts = probe._probe_counts()
    assert counts["untimed"] == 0
    # Elements 1..9 (1..9 bytes), then those of timed calls 65, 129 and 193 after the
    # first (elements 66, 130 and 194).
    assert counts["sized"] == 12
    assert counts["sized_bytes"] == sum(range(1, 10)) + 66 + 130 + 194


def test_a_failing_sizer_is_a_warning_once_and_the_stage_goes_on(probe_kind):
    calls = []

    def broken(element):
        calls.append(element)
        raise ValueError("no size")

    probe = collect.make_probe(iter(range(5000)), sizer=broken)
    with pytest.warns(RuntimeWarning, match="measuring an element's size failed.*no size"):
        assert list(probe) == list(range(5000))
    assert len(calls) == 1 and probe._probe_counts()["sized"] == 0
    with pytest.raises(TypeError, match="sizer"):
        collect.make_probe(iter([]), sizer=3)


def test_errors_are_counted_and_still_raised_in_their_place(probe_kind):
    ds = fl.Dataset.range(6).map(lambda x: 10 // (int(x) % 3), name="divide").with_options(PLAIN)
    outcomes = []
    with iter(ds) as it:
        while True:
            try:
                outcomes.append(int(next(it)))
            except ZeroDivisionError:
                outcomes.append("error")
            except StopIteration:
                break
        stages = _by_name(it.statistics())
    assert outcomes == ["error", 10, 5, "error", 10, 5]
    assert stages["divide"].elements == 6  # errors included


def test_epochs_of_repeat_add_up_in_one_stage(probe_kind):
    stats = _stats(fl.Dataset.range(10).map(lambda x: x + 1, name="inc").repeat(3), options=PLAIN)
    stages = _by_name(stats)
    assert stages["inc"].elements == 30 and stages["range"].elements == 30
    assert stats.elements == 30


def test_interleaved_files_are_one_stage(probe_kind, tmp_path):
    files = []
    for k in range(3):
        path = tmp_path / f"{k}.tfrecord"
        fl.write_tfrecord(fl.Dataset.from_tensor_slices([b"r%d-%d" % (k, i) for i in range(5)]),
                          str(path))
        files.append(str(path))
    ds = fl.Dataset.from_tensor_slices(files).interleave(fl.TFRecordDataset, cycle_length=2)
    stats = _stats(ds)
    assert [(s.name, s.parent, s.elements) for s in stats.stages] == [
        ("interleave(TFRecordDataset)", None, 15), ("tensor_slices", 0, 3),
        ("tfrecord", 0, 15)]
    assert stats.stages[2].operation == "tfrecord"
    assert stats.elements == 15


def test_read_ahead_stages_report_buffer_parallelism_and_worker_time(probe_kind):
    def work(x):
        total = 0
        for i in range(3000):
            total += i
        return x

    ds = fl.Dataset.range(300).map(work, num_parallel_calls=3, name="work").prefetch(4)
    options = fl.Options(profiling=fl.ProfilingOptions(statistics=True, interval=0.005),
                         autotune=fl.AutotuneOptions(processes=False))
    with iter(ds.with_options(options)) as it:
        assert [int(x) for x in it] == list(range(300))
        stats = it.statistics()
    stages = _by_name(stats)
    work_stage, prefetch = stages["work"], stages["prefetch"]
    assert work_stage.asynchronous and work_stage.parallelism == 3
    assert work_stage.executor == "threads" and work_stage.buffer_size == 6
    assert prefetch.asynchronous and prefetch.buffer_size == 4
    assert 0.0 <= prefetch.buffer_mean <= 1.0
    assert work_stage.self_seconds > 0  # the workers' CPU time
    assert stats.timeline and stats.timeline[-1].elements == 300
    assert set(stats.timeline[-1].buffers) <= {work_stage.id, prefetch.id}


def test_a_parallel_interleave_reports_its_open_datasets_buffers(probe_kind):
    # Its readers live in its cycle of open datasets, which it declares
    # (DatasetIterator.read_aheads): sampled on the consumer's thread, which alone changes
    # the cycle.
    ds = fl.Dataset.range(4).interleave(
        lambda i: fl.Dataset.range(200).map(lambda x: x + 0), cycle_length=2,
        num_parallel_calls=2, name="files")
    options = fl.Options(profiling=fl.ProfilingOptions(statistics=True, interval=0.001),
                         autotune=fl.AutotuneOptions(processes=False))
    with iter(ds.with_options(options)) as it:
        assert sorted(int(x) for x in it) == sorted(list(range(200)) * 4)
        stats = it.statistics()
    files = _by_name(stats)["files"]
    assert files.asynchronous and files.buffer_size is not None and files.buffer_size > 0
    assert 0.0 <= files.buffer_mean <= 1.0


def test_sampling_leaves_the_stages_attribute_storage_alone(probe_kind, monkeypatch):
    # Reading an iterator's __dict__ (vars()) turns its attribute storage into a plain dict
    # for good, and every attribute read of that stage is slower after (a shuffle 20%):
    # the sampler must ask the stages for their buffers instead.
    import builtins

    looked_into = []
    real_vars = builtins.vars

    def watching_vars(*args):
        looked_into.extend(type(a).__name__ for a in args)
        return real_vars(*args)

    monkeypatch.setattr(builtins, "vars", watching_vars)
    options = fl.Options(profiling=fl.ProfilingOptions(statistics=True, interval=0.001))
    ds = fl.Dataset.from_tensor_slices(np.arange(5000)).shuffle(100, seed=1).map(
        lambda x: x, num_parallel_calls=2).prefetch(2)
    with iter(ds.with_options(options)) as it:
        assert sorted(int(x) for x in it) == list(range(5000))
        assert len(it.statistics().timeline) > 1
    assert not [name for name in looked_into if name.endswith("Iterator")]


def test_consumer_time_between_calls_is_measured(probe_kind):
    ds = fl.Dataset.range(20)
    stats = _stats(ds, consume=lambda _: time.sleep(0.01))
    assert stats.consumer.calls == 20
    # 20 sleeps of 10 ms happen between next() calls: at least 0.19 s between, and the
    # range source makes waiting a small share.
    assert stats.consumer.between_seconds >= 0.19
    assert stats.consumer.wait_fraction < 0.5


def test_probes_keep_checkpoints_identical_and_restorable(probe_kind):
    ds = fl.Dataset.range(40).shuffle(8, seed=3).map(lambda x: x * 3).batch(4)
    # Both at epoch 0 (iter() would give the shared shuffle's next epoch to the second).
    with fl.PipelineIterator(ds) as plain, \
            fl.PipelineIterator(ds.with_options(STATS)) as measured:
        for _ in range(3):
            assert np.array_equal(next(plain), next(measured))
        state_plain, state_measured = plain.state_dict(), measured.state_dict()
    assert json.dumps(state_plain, sort_keys=True, default=str) == \
        json.dumps(state_measured, sort_keys=True, default=str)
    with iter(ds.with_options(STATS)) as restored:
        restored.load_state_dict(state_plain)
        rest = [b.tolist() for b in restored]
    with iter(ds) as reference:
        reference.load_state_dict(state_plain)
        assert rest == [b.tolist() for b in reference]


def test_checkpoint_conformance_with_statistics_on(probe_kind):
    ds = (fl.Dataset.range(30).map(lambda x: x + 1, num_parallel_calls=2)
          .shuffle(5, seed=1).batch(4).prefetch(2))
    check_checkpointing(ds.with_options(STATS))


def test_rewritten_pipelines_still_work_under_probes(probe_kind):
    # map vectorization reaches into its input iterators (isinstance checks, counters):
    # the probe must look like the iterator it stands for.
    ds = fl.Dataset.range(20).map(lambda x: x * 2).batch(5)
    with iter(ds.with_options(STATS)) as it:
        assert [b.tolist() for b in it] == [[0, 2, 4, 6, 8], [10, 12, 14, 16, 18],
                                            [20, 22, 24, 26, 28], [30, 32, 34, 36, 38]]


def test_statistics_start_no_thread_and_the_workers_end_when_the_pipeline_closes(
        probe_kind):
    ds = fl.Dataset.range(1000).map(lambda x: x, num_parallel_calls=2).prefetch(2)
    with no_leaked_threads(timeout=10):
        it = iter(ds.with_options(STATS))
        next(it)
        assert not any(t.name == "feedline-statistics" for t in threading.enumerate())
        it.close()


def test_samples_come_every_interval_beside_calls_that_release_the_gil(probe_kind):
    # A shuffle's numpy calls release the GIL and take it back at once: a sampler thread
    # of its own got it 0-1 times in 2 s here. Sampled from the consumer's reads, the
    # timeline has a point every interval.
    options = fl.Options(profiling=fl.ProfilingOptions(statistics=True, interval=0.05))
    ds = fl.Dataset.from_tensor_slices(np.arange(1000)).shuffle(100, seed=1).repeat()
    with iter(ds.with_options(options)) as it:
        started = time.perf_counter()
        while time.perf_counter() - started < 1.0:
            next(it)
        timeline = it.statistics().timeline
    assert len(timeline) >= 10
    gaps = [b.seconds - a.seconds for a, b in itertools.pairwise(timeline)]
    assert max(gaps) < 0.5


def test_a_failing_sample_is_a_warning_and_the_pipeline_goes_on(probe_kind, monkeypatch):
    def fail(self):
        raise RuntimeError("sample failed")

    options = fl.Options(profiling=fl.ProfilingOptions(statistics=True, interval=0.001))
    ds = fl.Dataset.range(100_000).map(lambda x: x + 1)
    with iter(ds.with_options(options)) as it:
        monkeypatch.setattr(collect.Collector, "sample", fail)
        with pytest.warns(RuntimeWarning, match="a statistics sample failed.*sample failed"):
            assert [int(x) for x in it] == list(range(1, 100_001))
        monkeypatch.undo()  # the last sample, at close, reads the stages


def test_statistics_after_close_are_kept(probe_kind):
    with iter(fl.Dataset.range(5).with_options(STATS)) as it:
        list(it)
    assert it.statistics().elements == 5


def test_probe_forwards_attributes_and_class():
    iterator = fl.Dataset.range(3)._make_iterator(fl.core.iterator.IteratorContext())
    for probe in (collect.make_probe(iterator), collect.PythonProbe(iterator)):
        assert isinstance(probe, type(iterator))
        assert probe.__class__ is type(iterator)
        probe.extra_attribute = 7
        assert iterator.extra_attribute == 7
        assert probe.state_dict() == iterator.state_dict()


def test_sampled_time_estimates_cover_every_call():
    # A stage whose calls take a known time: every call is timed (slow), so the estimate
    # of its total time in next() is at least the sleeps.
    def slow(x):
        time.sleep(0.002)
        return x

    stages = _by_name(_stats(fl.Dataset.range(30).map(slow, name="slow"), options=PLAIN))
    assert stages["slow"].wait_seconds >= 30 * 0.002
    assert stages["slow"].self_seconds >= 30 * 0.002
    assert stages["slow"].cpu_seconds < stages["slow"].self_seconds


def _pure_python(x):
    total = 0
    for i in range(2000):
        total += i
    return x


def test_worker_processes_report_their_stages(probe_kind):
    import psutil

    ds = fl.Dataset.range(400).map(_pure_python, name="work").batch(16).multiprocess(2)
    options = fl.Options(profiling=fl.ProfilingOptions(statistics=True, trace=True))
    with iter(ds.with_options(options)) as it:
        assert sum(len(b) for b in it) == 400
        pids = set(it._root.worker_pids)
        stats = it.statistics()
    names = [(s.name, s.parent, s.elements) for s in stats.stages]
    # Under the multiprocess stage: each worker's stages, added up over the 2 workers
    # (each reads all of range and keeps its blocks of 16).
    assert names == [("multiprocess", None, 25), ("batch", 0, 25), ("work", 1, 400),
                     ("block_shard", 2, 400), ("range", 3, 800)]
    assert stats.stages[0].executor == "processes" and stats.stages[0].parallelism == 2
    assert stats.stages[2].self_seconds > 0
    # Sizes measured in the workers come back with their counts: 25 batches of 16 int64.
    assert stats.stages[0].bytes == stats.stages[1].bytes == 25 * 16 * 8
    assert {span.process for span in stats.spans if span.stage == 2} == pids
    gone = psutil.wait_procs([psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)],
                             timeout=10)[1]
    assert not gone  # the workers ended with the pipeline
