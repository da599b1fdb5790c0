"""Dataset.distribute: each input pipeline's share under every AutoShardPolicy."""

import os

import pytest

import feedline as fl
from feedline.distribute.distribute import equal_shares

P = fl.AutoShardPolicy


def values(ds):
    return [x.decode() if isinstance(x, bytes) else int(x) for x in ds]


def shares(ds, n, policy=None):
    return [values(ds.distribute(fl.InputContext(n, i, n), policy)) for i in range(n)]


@pytest.fixture
def files(tmp_path):
    """Five TFRecord files; file f holds records "f-0" ... of 3 + f records."""
    paths = []
    for f in range(5):
        paths.append(str(tmp_path / f"f{f}.tfrecord"))
        fl.write_tfrecord(fl.Dataset.from_tensor_slices(
            [f"{f}-{i}".encode() for i in range(3 + f)]), paths[-1])
    return paths


def records(paths):
    return sorted(values(fl.TFRecordDataset(paths)))


def test_data_on_random_access_reads_by_index_in_equal_shares():
    ds = fl.Dataset.range(11).map(lambda x: x * 10)
    assert shares(ds, 3, P.DATA) == [[0, 30, 60], [10, 40, 70], [20, 50, 80]]
    assert shares(ds, 3, P.AUTO) == shares(ds, 3, P.DATA)


def test_global_shuffle_then_batch_shards_whole_batches():
    ds = fl.Dataset.range(20).global_shuffle(seed=3).batch(4)
    # Each pipeline at its first epoch, as in a process of its own (in this one, iter() of
    # the shared global_shuffle would go on to its next epochs).
    per_pipeline = [[b.tolist() for b in fl.PipelineIterator(
        ds.distribute(fl.InputContext(2, i, 2)))] for i in range(2)]
    everything = [b.tolist() for b in fl.PipelineIterator(ds)]
    assert per_pipeline == [everything[0::2][:2], everything[1::2][:2]]


def test_file_policy_shards_file_names(files):
    got = shares(fl.TFRecordDataset(files), 2, P.FILE)
    assert got[0] == values(fl.TFRecordDataset(files[0::2]))
    assert got[1] == values(fl.TFRecordDataset(files[1::2]))
    listed = (fl.Dataset.list_files(os.path.join(os.path.dirname(files[0]), "*.tfrecord"),
                                    shuffle=False)
              .interleave(fl.TFRecordDataset, cycle_length=2))
    got = shares(listed, 2, P.FILE)
    assert sorted(got[0]) == records(files[0::2]) and sorted(got[1]) == records(files[1::2])
    assert shares(listed, 2, P.AUTO) == got


def test_file_policy_errors(files):
    with pytest.raises(ValueError, match="reads no list of files"):
        fl.Dataset.range(5).distribute(fl.InputContext(2, 0, 2), P.FILE)
    with pytest.raises(ValueError, match=r"reads 1 file\(s\) but there are 2 input pipelines"):
        fl.TFRecordDataset(files[:1]).distribute(fl.InputContext(2, 0, 2), P.FILE)


def test_data_policy_without_random_access_shards_records(files):
    listed = (fl.Dataset.list_files(os.path.join(os.path.dirname(files[0]), "*.tfrecord"),
                                    shuffle=False)
              .interleave(fl.TFRecordDataset, cycle_length=2))
    whole = values(listed)
    got = shares(listed, 2, P.DATA)
    assert got == [whole[0::2], whole[1::2]]
    compressed_dir = os.path.dirname(files[0])
    gz = []
    for f in files:
        gz.append(f + ".gz")
        fl.write_tfrecord(fl.TFRecordDataset(f), gz[-1], compression_type="GZIP")
    ds = fl.TFRecordDataset(gz[:1], compression_type="GZIP")  # one file: no FILE sharding
    assert shares(ds, 2) == [values(ds)[0::2], values(ds)[1::2]]
    assert compressed_dir


def test_auto_prefers_index_then_file_then_data(files):
    # A random-access TFRecord list: by index (equal shares) rather than by file.
    got = shares(fl.TFRecordDataset(files), 2, P.AUTO)
    assert [len(g) for g in got] == [12, 12]
    assert got == shares(fl.TFRecordDataset(files), 2, P.DATA)
    # Compressed files have no random access: by file.
    gz = []
    for f in files:
        gz.append(f + ".gz")
        fl.write_tfrecord(fl.TFRecordDataset(f), gz[-1], compression_type="GZIP")
    by_file = shares(fl.TFRecordDataset(gz, compression_type="GZIP"), 2, P.AUTO)
    assert by_file[0] == values(fl.TFRecordDataset(files[0::2]))


def test_off_and_a_single_pipeline():
    ds = fl.Dataset.range(5)
    assert ds.distribute(fl.InputContext(2, 1, 2), P.OFF) is ds
    unindexed = fl.Dataset.range(5).filter(lambda x: x != 2).repeat(2)
    assert unindexed.distribute(fl.InputContext()) is unindexed
    # A random-access pipeline is read by index even alone, so that its checkpoints resume
    # on any number of pipelines.
    alone = ds.distribute(fl.InputContext())
    assert values(alone) == [0, 1, 2, 3, 4]
    it = iter(alone)
    next(it)
    state = it.state_dict()
    it.close()
    shares = [ds.distribute(fl.InputContext(2, i)) for i in range(2)]
    resumed = []
    for share in shares:
        with iter(share) as it:
            it.load_state_dict(state)
            resumed += values(it)
    assert sorted(resumed) == [1, 2, 3, 4]


def test_policy_from_options(files):
    ds = fl.TFRecordDataset(files).with_options(
        fl.Options(distribute=fl.DistributeOptions(auto_shard_policy=P.FILE)))
    assert shares(ds, 2)[1] == values(fl.TFRecordDataset(files[1::2]))
    assert shares(ds, 2, P.DATA) != shares(ds, 2)
    with pytest.raises(ValueError, match="must be an AutoShardPolicy"):
        fl.Dataset.range(3).distribute(fl.InputContext(2, 0, 2), 7)
    with pytest.raises(TypeError, match="needs a feedline.InputContext"):
        fl.Dataset.range(3).distribute((2, 0))


def test_positional_stages_shard_the_output():
    ds = fl.Dataset.range(9).take(7)
    assert shares(ds, 2, P.DATA) == [[0, 2, 4], [1, 3, 5]]  # equalized: 4 and 3 -> 3


def test_known_unequal_shares_are_cut_to_the_smallest():
    ds = fl.Dataset.zip(fl.Dataset.range(7), fl.Dataset.range(7)).map(lambda a, b: a + b)
    got = shares(ds, 3, P.DATA)
    assert [len(g) for g in got] == [2, 2, 2]
    assert equal_shares(ds, fl.InputContext(3, 0, 3), P.DATA)


def test_unknown_shares_are_reported(files):
    ctx = fl.InputContext(2, 0, 2)
    assert not equal_shares(fl.Dataset.range(7).filter(lambda x: x > 2), ctx)
    assert equal_shares(fl.Dataset.range(7), ctx)
    gz = files[0] + ".gz"
    fl.write_tfrecord(fl.TFRecordDataset(files[0]), gz, compression_type="GZIP")
    assert not equal_shares(fl.TFRecordDataset([gz, gz], compression_type="GZIP"), ctx)


def test_file_caches_are_refused():
    with pytest.raises(ValueError, match="cache"):
        fl.Dataset.range(5).cache("/tmp/x").distribute(fl.InputContext(2, 0, 2))


def test_every_share_of_a_global_shuffle_resumes_elastically():
    ds = fl.Dataset.range(60).global_shuffle(seed=9).map(lambda x: x + 100).batch(3)
    # Each pipeline at its first epoch, as in a process of its own.
    iterators = [fl.PipelineIterator(ds.distribute(fl.InputContext(4, i, 4))) for i in range(4)]
    seen = [int(v) for it in iterators for _ in range(2) for v in next(it)]
    state = iterators[0].state_dict()
    for it in iterators:
        it.close()
    for i in range(2):
        with iter(ds.distribute(fl.InputContext(2, i, 2))) as it:
            it.load_state_dict(state)
            seen += [int(v) for batch in it for v in batch]
    assert sorted(seen) == list(range(100, 160))


def test_input_context():
    ctx = fl.InputContext(2, 1, 8)
    assert ctx.get_per_replica_batch_size(64) == 8
    assert ctx.get_per_pipeline_batch_size(64) == 32
    with pytest.raises(ValueError, match="multiple of the number of replicas"):
        ctx.get_per_replica_batch_size(60)
    with pytest.raises(ValueError, match="input_pipeline_id must be in"):
        fl.InputContext(2, 2, 2)
    with pytest.raises(ValueError, match="positive multiple of num_input_pipelines"):
        fl.InputContext(2, 0, 3)
    with pytest.raises(ValueError, match="num_input_pipelines must be >= 1"):
        fl.InputContext(0, 0, 1)


def test_step_schedule():
    schedule = fl.StepSchedule(num_elements=1000, global_batch_size=64)
    assert schedule.steps_per_epoch == 15
    assert schedule.locate(0) == (0, 0) and schedule.locate(31) == (2, 1)
    assert schedule.elements_before(16) == 960 + 64
    assert fl.steps_per_epoch(1000, 64, drop_remainder=False) == 16
    assert fl.StepSchedule.for_context(1000, 8, fl.InputContext(2, 0, 8)).steps_per_epoch == 15
    with pytest.raises(ValueError):
        fl.StepSchedule(10, 0)
