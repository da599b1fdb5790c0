"""Review of the placement package, the tuner's knobs, worker environments, the allocator and
the device image ops (session review 3, commits a5d4e3b..090b730).

Each test pins a bug found in review: it failed before the fix committed with it.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import feedline as fl
from feedline.core.validation import schedulable_cpus
from feedline.execution import allocator
from feedline.placement.ipc.spawn import NATIVE_THREAD_VARIABLES

QUICK = fl.Options(threading=fl.ThreadingOptions(close_timeout=0.5))


def _twice(x):
    return x * 2


# ------------------------------------------------------------------ the pipeline's placement
def _two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU budget of two, whatever this machine has: the pipeline's placement is decided."""
    monkeypatch.setattr("feedline.core.options.schedulable_cpus", lambda: 2)


@pytest.mark.timeout(120)
def test_a_file_cache_with_maps_in_processes_stays_on_threads(monkeypatch, tmp_path):
    # Before the placement package, a map given executor="process" kept the pipeline on
    # threads before the sharding plan was asked for; the policy's extraction asked for the
    # plan first, and the plan refuses a cache(filename): iteration raised ValueError.
    _two_cpus(monkeypatch)
    ds = (fl.Dataset.range(20).cache(str(tmp_path / "c"))
          .map(_twice, num_parallel_calls=2, executor="process")
          .prefetch(fl.AUTOTUNE).with_options(QUICK))
    with iter(ds) as it:
        assert [int(x) for x in it] == [2 * x for x in range(20)]
        assert it.process_decision.mode == "threads"
        assert it.process_decision.reason == (
            "map(_twice): calls already in worker processes (executor='process')")


@pytest.mark.timeout(120)
def test_a_file_cache_before_prefetch_autotune_stays_on_threads(monkeypatch, tmp_path):
    # ds.cache(filename).prefetch(AUTOTUNE), tf.data's most common ending, raised ValueError
    # on any machine of two CPUs or more: the whole-pipeline placement asked the sharding
    # plan, which refuses file caches, instead of keeping such a pipeline where it is.
    _two_cpus(monkeypatch)
    path = str(tmp_path / "c")
    ds = fl.Dataset.range(5).cache(path).prefetch(fl.AUTOTUNE).with_options(QUICK)
    for _ in range(2):  # writes the cache, then reads it
        with iter(ds) as it:
            assert [int(x) for x in it] == [0, 1, 2, 3, 4]
            assert it.process_decision.mode == "threads"
            assert "writes files" in it.process_decision.reason


def test_the_placement_policy_keeps_a_pipeline_that_writes_files():
    from feedline.placement.policy import place_pipeline

    plan = place_pipeline(8, None, [], "output", False, True, True,
                          writes_files=["cache('/tmp/c')"])
    assert plan.move is None
    assert plan.reason.startswith("cache('/tmp/c') writes files")
    forced = place_pipeline(8, True, [], "output", False, True, True,
                            writes_files=["cache('/tmp/c')"])
    assert forced.move is None
    # A map's calls in processes is still the reason given first, as before.
    assert place_pipeline(8, None, ["map(f)"], "output", False, True, True,
                          writes_files=["cache"]).reason.startswith("map(f): calls already")


# ------------------------------------------------------------------ checkpoints across the move
# Saved by feedline at a5d4e3b (MultiprocessDataset in feedline.transforms.multiprocess) from
# fl.Dataset.range(12).multiprocess(2).batch(2) after two batches.
OLD_STATE = {
    "feedline_iterator": 2,
    "pipeline": {"digest": "65d1cbe771f36df7", "stages": [
        ["RangeDataset(dtype=dtype('int64'), range=range(0, 12))", "1de62f7f358caed0"],
        ["MultiprocessDataset(num_workers=2)", "f1c7ff3cfcceb40a"],
        ["BatchDataset(batch_size=2, drop_remainder=False)", "65d1cbe771f36df7"]]},
    "root": {"type": "batch", "version": 2, "at": 2, "next": 2, "done": [], "errors": [],
             "input": {"type": "multiprocess", "version": 1, "epoch": 0, "num_workers": 2,
                       "next_worker": 0, "ended": [False, False], "workers": [
                           {"at": 1, "next": 2, "done": [], "errors": [], "input": {
                               "type": "ShardIterator", "version": 1, "position": 1,
                               "input": {"type": "RangeIterator", "version": 1,
                                         "position": 1}}},
                           {"at": 1, "next": 2, "done": [], "errors": [], "input": {
                               "type": "ShardIterator", "version": 1, "position": 2,
                               "input": {"type": "RangeIterator", "version": 1,
                                         "position": 2}}}]}},
    "checksum": "crc32c:32ef1a14"}


def test_multiprocess_keeps_its_fingerprint_across_the_move():
    # The fingerprint named the stage's class by module: moving MultiprocessDataset to
    # feedline.placement changed it, and every checkpoint of a pipeline with multiprocess()
    # was refused ("saved from a different pipeline: ... has MultiprocessDataset(num_workers=2)
    # where this one has MultiprocessDataset(num_workers=2)").
    from feedline.core.fingerprint import PipelineFingerprint

    ds = fl.Dataset.range(12).multiprocess(2).batch(2)
    assert PipelineFingerprint.of(ds).digest == OLD_STATE["pipeline"]["digest"]


@pytest.mark.timeout(120)
def test_a_multiprocess_checkpoint_saved_before_the_move_restores():
    ds = fl.Dataset.range(12).multiprocess(2).batch(2).with_options(QUICK)
    with iter(ds) as it:
        it.load_state_dict(OLD_STATE)
        assert [batch.tolist() for batch in it] == [[4, 5], [6, 7], [8, 9], [10, 11]]


# ------------------------------------------------------------------ worker environments
def _native_threads(_: object = None) -> tuple[str | None, ...]:
    return tuple(os.environ.get(name) for name in NATIVE_THREAD_VARIABLES)


@pytest.mark.timeout(120)
def test_a_feeder_s_map_workers_get_their_own_share_of_the_cpus(monkeypatch):
    # The feeder's environment holds the native thread counts feedline gave it (the whole
    # budget); its map's worker processes inherited them as if the user had set them
    # ("left alone where the user set them"), so each of n map workers started a thread per
    # CPU: the oversubscription the counts are there to prevent.
    for name in NATIVE_THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    ds = (fl.Dataset.range(4).map(_native_threads, num_parallel_calls=2, executor="process")
          .multiprocess(1).with_options(QUICK))
    share = str(max(1, schedulable_cpus() // 2))
    assert [tuple(value.decode() for value in values) for values in ds] == \
        [(share,) * len(NATIVE_THREAD_VARIABLES)] * 4


def test_a_worker_s_own_workers_get_their_share_but_the_user_s_setting_stays(monkeypatch):
    from feedline.placement.ipc import spawn

    for name in NATIVE_THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "7")  # the user's
    feeder = spawn.worker_environment(8)
    assert [feeder[name] for name in NATIVE_THREAD_VARIABLES] == ["8", "8", "7", "8"]
    # In the feeder (its environment is the one it was given), a pool of four workers:
    monkeypatch.setattr(os, "environ", dict(feeder))
    worker = spawn.worker_environment(2)
    assert [worker[name] for name in NATIVE_THREAD_VARIABLES] == ["2", "2", "7", "2"]
    # With no share given, what the process has is passed on as it is.
    assert [spawn.worker_environment(None)[name] for name in NATIVE_THREAD_VARIABLES] == \
        ["8", "8", "7", "8"]


# ------------------------------------------------------------------ the allocator
def test_the_allocator_leaves_a_system_without_confstr_alone(monkeypatch):
    # os.confstr does not exist on Windows: configure() (called by every pipeline's
    # iterator) raised AttributeError there instead of leaving the allocator alone.
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
                 "GLIBC_TUNABLES", "FEEDLINE_MALLOC_TUNING"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delattr(os, "confstr", raising=False)
    assert allocator._configure() == "not glibc"


# ------------------------------------------------------------------ device image ops
@pytest.mark.parametrize("source", [np.float32, np.float64])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_device_float_to_int64_saturates_as_the_host_op(source):
    # The saturating clamp's upper limit for int64: the host op (TensorFlow's) compares it in
    # float64, where 2**63 - 1 rounds to 2**63, and keeps it; the device op compared it
    # exactly and stepped one ulp down, so its results differed from the host op's for every
    # value from 1.0 up ("bit for bit" with feedline.image.convert_image_dtype).
    torch = pytest.importorskip("torch")
    from feedline import image as host
    from feedline.image import device as dv

    image = np.array([[[-3.0, -1.0, 0.0, 0.25, 0.5, 1.0, 1.5, 2.0e4]]], source)
    got = dv.convert_image_dtype(torch.from_numpy(image), torch.int64, saturate=True).numpy()
    expected = host.convert_image_dtype(image, np.int64, saturate=True)
    assert got.tolist() == expected.tolist()
