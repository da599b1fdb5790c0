"""ArrayRecordDataset: golden files written by array-record, random access, checkpoints, errors."""

import json
import shutil
import sys
from pathlib import Path

import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.distribute.autoshard import plan_sharding
from feedline.formats.array_record import ArrayRecordRandomReader
from feedline.testing import check_checkpointing

pytest.importorskip("array_record")

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "array_record"
EXPECTED = json.loads((GOLDEN / "expected.json").read_text())
SHARDS = [str(GOLDEN / shard["file"]) for shard in EXPECTED["shards"]]
RECORDS = [[bytes.fromhex(h) for h in shard["records"]] for shard in EXPECTED["shards"]]
ALL = RECORDS[0] + RECORDS[1]


def write(path, records, options="group_size:1"):
    fl.write_array_record(fl.Dataset.from_tensor_slices(records), str(path), options)
    return str(path)


def test_golden_files_read_in_order():
    assert list(fl.ArrayRecordDataset(SHARDS[0])) == RECORDS[0]
    assert list(fl.ArrayRecordDataset(SHARDS[1])) == RECORDS[1]  # group_size 4, uncompressed
    assert list(fl.ArrayRecordDataset(SHARDS)) == ALL
    assert list(fl.ArrayRecordDataset(SHARDS, block_size=3)) == ALL


def test_random_reads_match_array_record_data_source():
    # ArrayRecordDataSource is the reader Grain re-exports (grain.ArrayRecordDataSource);
    # expected.json holds what it returned for these indices when the files were written.
    recorded = EXPECTED["data_source"]
    ds = fl.ArrayRecordDataset(SHARDS)
    assert len(ds) == recorded["len"] == len(ALL)
    expected = [bytes.fromhex(h) for h in recorded["records"]]
    with ArrayRecordRandomReader(SHARDS) as reader:
        assert reader.get_many(recorded["indices"]) == expected
    assert [ds[i] for i in recorded["indices"]] == expected
    assert ds[-1] == ALL[-1] and ds[0] == b""


def test_random_reads_match_the_data_source_live():
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    source = ArrayRecordDataSource(SHARDS)
    indices = [62, 0, 40, 39, 41, 5, 5, 61]
    with ArrayRecordRandomReader(SHARDS) as reader:
        assert reader.get_many(indices) == source.__getitems__(indices)


def test_global_shuffle_reads_every_record_once_in_the_permuted_order():
    ds = fl.ArrayRecordDataset(SHARDS)
    order = [int(i) for i in fl.Dataset.range(len(ALL)).global_shuffle(seed=7)]
    assert list(ds.global_shuffle(seed=7)) == [ALL[i] for i in order]
    batches = list(ds.global_shuffle(seed=7).batch(10))
    assert [r for b in batches for r in b] == [ALL[i] for i in order]


def test_checkpointing_in_order_and_shuffled(tmp_path):
    paths = [write(tmp_path / "a.array_record", [b"a%d" % i for i in range(5)]),
             write(tmp_path / "b.array_record", []),
             write(tmp_path / "c.array_record", [b"c%d" % i for i in range(3)])]
    check_checkpointing(fl.ArrayRecordDataset(paths, block_size=2))
    check_checkpointing(fl.ArrayRecordDataset(paths).global_shuffle(seed=3).batch(3))


def test_state_is_file_and_record_index():
    with iter(fl.ArrayRecordDataset(SHARDS, block_size=7)) as it:
        for _ in range(len(RECORDS[0]) + 2):
            next(it)
        state = it.state_dict()["root"]
    assert (state["file_index"], state["position"]) == (1, {"record_index": 2})


def test_dataset_of_names_and_parallel_reads():
    names = fl.Dataset.from_tensor_slices(SHARDS)
    assert list(fl.ArrayRecordDataset(names)) == ALL
    parallel = list(fl.ArrayRecordDataset(SHARDS, num_parallel_reads=2))
    expected = [r for pair in zip(RECORDS[0], RECORDS[1], strict=False) for r in pair]
    expected += RECORDS[0][len(RECORDS[1]):]
    assert parallel == expected
    with pytest.raises(TypeError, match="list of file names"):
        fl.ArrayRecordDataset(names).global_shuffle(1)


def test_sharding_by_index_and_by_file(tmp_path):
    shuffled = fl.ArrayRecordDataset(SHARDS).global_shuffle(1, reshuffle_each_iteration=False)
    assert plan_sharding(shuffled, 2).policy == "index"
    shares = [list(shuffled.distribute(fl.InputContext(2, k))) for k in range(2)]
    # Equal shares of the 63 records: one record is left out of this epoch.
    assert len(shares[0]) == len(shares[1]) == 31
    assert len(set(shares[0] + shares[1])) == 62 and set(shares[0] + shares[1]) <= set(ALL)
    plan = plan_sharding(fl.ArrayRecordDataset(SHARDS).batch(4), 2)
    assert (plan.policy, plan.files) == ("file", 2)


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_worker_processes_read_their_share():
    def make() -> fl.Dataset:  # a first iteration (epoch 0) of its own objects each time
        return fl.ArrayRecordDataset(SHARDS).global_shuffle(seed=2).batch(8)

    parallel = make().multiprocess(2)
    assert [b.tolist() for b in parallel] == [b.tolist() for b in make()]


def test_missing_file_is_named(tmp_path):
    missing = str(tmp_path / "missing.array_record")
    with pytest.raises(FileNotFoundError, match="missing.array_record"):
        list(fl.ArrayRecordDataset(missing))
    with pytest.raises(FileNotFoundError, match="missing.array_record"):
        len(fl.ArrayRecordDataset([SHARDS[0], missing]))


def test_other_formats_and_truncated_files_are_data_loss(tmp_path):
    junk = tmp_path / "junk.array_record"
    junk.write_bytes(b"not an array record file" * 10)
    truncated = tmp_path / "truncated.array_record"
    truncated.write_bytes(Path(SHARDS[0]).read_bytes()[:70_000])
    for path in (junk, truncated):
        with pytest.raises(fl.DataLossError, match=f"{path.name} is not a readable "
                                                   "ArrayRecord file") as raised:
            fl.ArrayRecordDataset(str(path))[0]
        assert raised.value.path == str(path)
    # Reading in order, the next file follows the damaged one.
    it = fl.ArrayRecordDataset([str(junk), SHARDS[1]])._make_iterator(IteratorContext())
    with pytest.raises(fl.DataLossError, match="junk.array_record"):
        next(it)
    assert list(it) == RECORDS[1]
    it.close()


def damaged_copy(tmp_path, record_index):
    """Shard 1 (uncompressed) with one byte of record ``record_index``'s data flipped."""
    data = bytearray(Path(SHARDS[1]).read_bytes())
    at = data.find(RECORDS[1][record_index])
    assert at > 0 and data.find(RECORDS[1][record_index], at + 1) < 0
    data[at + 3] ^= 0xFF
    path = tmp_path / "damaged.array_record"
    path.write_bytes(bytes(data))
    return str(path)


def test_damaged_records_are_data_loss_naming_file_and_record(tmp_path):
    # group_size 4: records 8-11 share the damaged chunk, so each of them is unreadable.
    path = damaged_copy(tmp_path, 9)
    ds = fl.ArrayRecordDataset(path)
    assert ds[7] == RECORDS[1][7] and ds[12] == RECORDS[1][12]
    with pytest.raises(fl.DataLossError, match=r"record 9 of .*damaged.array_record") as raised:
        ds[9]
    assert (raised.value.path, raised.value.record_index) == (path, 9)
    with ArrayRecordRandomReader([SHARDS[0], path]) as reader:
        with pytest.raises(fl.DataLossError, match="record 8 of"):
            reader.get_many([0, len(RECORDS[0]) + 3, len(RECORDS[0]) + 8])
    # In order: every record before the damaged chunk, then the error, then the next file.
    it = fl.ArrayRecordDataset([path, SHARDS[0]])._make_iterator(IteratorContext())
    assert [next(it) for _ in range(8)] == RECORDS[1][:8]
    with pytest.raises(fl.DataLossError, match="record 8 of .*damaged") as raised:
        next(it)
    assert raised.value.record_index == 8
    assert list(it) == RECORDS[0]
    it.close()
    assert list(fl.ArrayRecordDataset([path, SHARDS[0]]).ignore_errors()) == \
        RECORDS[1][:8] + RECORDS[0]


def test_remote_urls_are_refused_clearly():
    with pytest.raises(ValueError, match="memory://x.array_record is not a local file"):
        list(fl.ArrayRecordDataset("memory://x.array_record"))


def test_writer_round_trip_and_options(tmp_path):
    records = [b"", b"x" * 100_000, "text", b"\x00"]
    path = write(tmp_path / "w.array_record", records, options="group_size:2")
    assert list(fl.ArrayRecordDataset(path)) == [b"", b"x" * 100_000, b"text", b"\x00"]
    with pytest.raises(TypeError, match="element 0 is int"):
        write(tmp_path / "bad.array_record", [1, 2])
    with pytest.raises(OSError, match="cannot open the file.*No such file"):
        write(tmp_path / "no" / "folder.array_record", [b"a"])


def test_file_ending_copies_are_read_from_file_urls(tmp_path):
    copy = tmp_path / "copy.array_record"
    shutil.copy(SHARDS[0], copy)
    assert list(fl.ArrayRecordDataset("file://" + str(copy))) == RECORDS[0]


def test_bad_arguments():
    with pytest.raises(ValueError, match="block_size"):
        fl.ArrayRecordDataset(SHARDS, block_size=0)


def test_without_array_record_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "array_record.python", None)
    monkeypatch.setitem(sys.modules, "array_record.python.array_record_module", None)
    with pytest.raises(ImportError, match=r"pip install feedline\[array_record\]"):
        fl.ArrayRecordDataset(SHARDS)
