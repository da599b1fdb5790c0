"""fl.datasets.load pipelines: checkpoints mid-split, seeded shard shuffling, the auto-shard
file policy and worker processes."""

import threading

import pytest
from tfds_golden import ROOT

from feedline.datasets import ReadConfig, load
from feedline.distribute.autoshard import plan_sharding, shard_pipeline
from feedline.testing import check_checkpointing


def _ids(ds):
    return [int(x["id"]) if isinstance(x, dict) else int(x[0]) for x in ds]


def test_checkpoint_mid_split():
    ds = load("fl_order/small:1.0.0", split="train[20:60]+test[2:5]", data_dir=ROOT)
    check_checkpointing(ds, steps=[0, 1, 10, 16, 17, 30, 43])


def test_checkpoint_every_feature():
    check_checkpointing(load("fl_features", split="train[1:]+test", data_dir=ROOT))


def test_checkpoint_array_record():
    pytest.importorskip("array_record")
    check_checkpointing(load("fl_array", split="train[5:30]", data_dir=ROOT),
                        steps=[0, 3, 15, 25])


def test_shuffle_files_is_seeded_and_checkpointable():
    def run(seed, **kw):
        return _ids(load("fl_order/small:1.0.0", split="train", data_dir=ROOT,
                         shuffle_files=True, seed=seed, **kw))

    plain = _ids(load("fl_order/small:1.0.0", split="train", data_dir=ROOT))
    orders = {tuple(run(seed)) for seed in range(6)}
    assert all(sorted(o) == sorted(plain) for o in orders)
    assert len(orders) > 1 and run(3) == run(3)
    config = ReadConfig(shuffle_seed=3)
    assert _ids(load("fl_order/small:1.0.0", split="train", data_dir=ROOT, shuffle_files=True,
                     read_config=config)) == run(3)
    ds = load("fl_order/small:1.0.0", split="train[:60]", data_dir=ROOT, shuffle_files=True,
              seed=7)
    check_checkpointing(ds, steps=[0, 5, 33])
    # Each epoch draws a new shard order unless the config keeps it.
    two = _ids(ds.repeat(2))
    assert sorted(two[:60]) == sorted(two[60:])
    fixed = load("fl_order/small:1.0.0", split="train", data_dir=ROOT, shuffle_files=True,
                 read_config=ReadConfig(shuffle_seed=1, shuffle_reshuffle_each_iteration=False))
    epochs = _ids(fixed.repeat(2))
    assert epochs[:103] == epochs[103:]


def test_file_policy_shards_by_shard_file():
    ds = load("fl_order/small:1.0.0", split="train+test", data_dir=ROOT)
    assert plan_sharding(ds, 2).policy == "file"
    shards = [_ids(shard_pipeline(ds, 4, i)) for i in range(4)]
    assert sorted(sum(shards, [])) == sorted(_ids(ds))
    # Shard 0 reads instructions 0 and 4: train shard 0 (26 records) and test shard 0 (2).
    assert len(shards[0]) == 28


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_worker_processes():
    ds = load("fl_features", split="train+test", data_dir=ROOT).map(
        lambda x: (x["nested"]["a"], x["image_png"].shape, x["text"]))
    before = threading.active_count()
    got = sorted(ds.multiprocess(2), key=lambda x: (int(x[0]), x[2]))
    assert got == sorted(ds, key=lambda x: (int(x[0]), x[2]))
    assert threading.active_count() <= before
