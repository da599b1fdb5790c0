import json
import logging
import os
import pickle
import shutil

import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.testing import assert_elements_equal, check_checkpointing
from feedline.transforms.cache import CACHE_SUFFIX


class Counter:
    """A map function that counts its calls (so tests can see whether the input was read)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        return x


def ints(ds):
    return [int(x) for x in ds]


def counted_cache(n=3, filename=""):
    counter = Counter()
    return fl.Dataset.range(n).map(counter).cache(filename), counter


def test_later_epochs_replay_from_memory():
    ds, counter = counted_cache()
    assert ints(ds.repeat(3)) == [0, 1, 2] * 3
    assert counter.calls == 3


def test_new_iterators_over_the_same_object_replay():
    ds, counter = counted_cache()
    assert ints(ds) == [0, 1, 2]
    assert ints(ds) == [0, 1, 2]
    with iter(ds) as it:
        assert int(next(it)) == 0
    assert counter.calls == 3
    assert ds._store.elements is not None


def test_each_dataset_object_has_its_own_cache():
    counter = Counter()
    base = fl.Dataset.range(3).map(counter)
    a, b = base.cache(), base.cache()
    ints(a)
    ints(b)
    ints(a)
    assert counter.calls == 6


def test_partial_pass_is_not_used_later(caplog):
    ds, counter = counted_cache(5)
    with caplog.at_level(logging.WARNING, logger="feedline.transforms.cache"):
        assert ints(ds.take(2).repeat(2)) == [0, 1, 0, 1]
    assert counter.calls == 4
    assert any("partial cache is discarded" in r.getMessage() for r in caplog.records)
    assert ints(ds) == [0, 1, 2, 3, 4]  # nothing truncated
    assert counter.calls == 9
    assert ints(ds) == [0, 1, 2, 3, 4]
    assert counter.calls == 9


def test_rewritten_graph_shares_the_cache():
    counter = Counter()
    ds = fl.Dataset.range(3).map(counter).map(lambda x: x * 2).cache()  # maps get fused
    assert ints(ds) == [0, 2, 4]
    assert ints(ds) == [0, 2, 4]
    assert counter.calls == 3


def test_graph_stays_picklable_and_copies_start_empty():
    ds = fl.Dataset.range(4).cache()
    ints(ds)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy._store.elements is None and ds._store.elements is not None
    assert ints(copy) == [0, 1, 2, 3]


def test_failed_elements_are_not_cached():
    counter = Counter()

    def fail_on_1(x):
        counter(x)
        if x == 1:
            raise ValueError("bad")
        return x

    ds = fl.Dataset.range(4).map(fail_on_1).cache()
    assert ints(ds.ignore_errors()) == [0, 2, 3]
    assert ints(ds) == [0, 2, 3]  # replayed: no error any more
    assert counter.calls == 4


def test_empty_input_caches_nothing():
    ds, counter = counted_cache(0)
    assert ints(ds.repeat(3)) == []
    assert ds._store.elements == ()
    assert counter.calls == 0


def test_cardinality_and_spec():
    ds = fl.Dataset.range(4).cache()
    assert ds.cardinality() == 4
    assert ds.element_spec == fl.Dataset.range(4).element_spec
    with pytest.raises(TypeError):
        fl.Dataset.range(4).cache(3)


def test_nested_elements_round_trip():
    data = {"a": np.arange(6, dtype=np.int32).reshape(3, 2), "b": [b"x", b"y", b""]}
    ds = fl.Dataset.from_tensor_slices(data).cache()
    first, second = list(ds), list(ds)
    assert_elements_equal(second, first)


def test_memory_cache_checkpointing():
    check_checkpointing(fl.Dataset.range(7).map(lambda x: x * 3).cache())


def test_restore_while_filling_continues_but_does_not_publish():
    ds, _ = counted_cache(5)
    with iter(ds) as it:
        assert ints([next(it), next(it)]) == [0, 1]
        state = json.loads(json.dumps(it.state_dict()))
    assert state["root"]["mode"] == "input"
    other, other_counter = counted_cache(5)  # a fresh graph, as after a restart
    with iter(other) as restored:
        restored.load_state_dict(state)
        assert ints(restored) == [2, 3, 4]
    assert other._store.elements is None and other_counter.calls == 3
    assert ints(other) == [0, 1, 2, 3, 4]
    assert other._store.elements is not None and other_counter.calls == 8


def test_restore_of_a_replaying_iterator_without_the_cache_refills_it():
    ds, _ = counted_cache(5)
    ints(ds)
    with iter(ds) as it:
        assert ints([next(it), next(it)]) == [0, 1]
        state = json.loads(json.dumps(it.state_dict()))
    assert state["root"]["mode"] == "cache"
    other, counter = counted_cache(5)
    with iter(other) as restored:
        restored.load_state_dict(state)
        assert ints(restored) == [2, 3, 4]
    assert counter.calls == 5 and other._store.elements is not None
    assert ints(other) == [0, 1, 2, 3, 4] and counter.calls == 5


def test_restore_with_the_cache_complete_replays_it():
    ds, counter = counted_cache(5)
    with iter(ds) as it:
        next(it)
        state = it.state_dict()
    ints(ds)  # completes the cache
    calls = counter.calls
    with iter(ds) as restored:
        restored.load_state_dict(state)
        assert ints(restored) == [1, 2, 3, 4]
    assert counter.calls == calls


# ----------------------------------------------------------------------------- file cache
def test_file_cache_is_reused_by_other_pipelines(tmp_path):
    prefix = str(tmp_path / "sub" / "train")
    ds, counter = counted_cache(4, prefix)
    assert ints(ds.repeat(2)) == [0, 1, 2, 3] * 2
    assert counter.calls == 4
    assert os.listdir(tmp_path / "sub") == ["train" + CACHE_SUFFIX]
    again, other_counter = counted_cache(4, prefix)
    assert ints(again) == [0, 1, 2, 3]
    assert other_counter.calls == 0
    assert type(next(iter(again))) is np.int64


def test_file_cache_partial_pass_leaves_no_file(tmp_path):
    ds, _ = counted_cache(4, tmp_path / "c")
    assert ints(ds.take(2)) == [0, 1]
    assert os.listdir(tmp_path) == []


def test_file_cache_of_nested_bytes_elements(tmp_path):
    data = ([b"a", b"bc"], np.arange(4, dtype=np.float32).reshape(2, 2), ["s", "t"])
    ds = fl.Dataset.from_tensor_slices(data).cache(str(tmp_path / "c"))
    first = list(ds)
    assert_elements_equal(list(ds), first)


def test_file_cache_checkpointing(tmp_path):
    check_checkpointing(fl.Dataset.range(6).map(lambda x: (x, b"v")).cache(str(tmp_path / "c")))


def test_the_file_cache_is_a_store_of_chunk_files(tmp_path):
    # Issue 26: one on-disk format for elements (it was JSON/base64 lines).
    ds = fl.Dataset.range(5).map(lambda x: (x, b"v%d" % x)).cache(str(tmp_path / "c"))
    first = list(ds)
    folder = tmp_path / ("c" + CACHE_SUFFIX)
    manifest = json.loads((folder / "dataset.json").read_text())
    assert manifest["identity"]["kind"] == "cache" and manifest["elements"] == 5
    assert (folder / "shard-00000" / "chunk-00000.flchunk").read_bytes()[:8] == b"FLCHUNK2"
    assert_elements_equal(list(ds), first)
    assert sorted(os.listdir(tmp_path)) == ["c" + CACHE_SUFFIX]


def test_file_cache_keeps_leaf_types(tmp_path):
    import collections

    from feedline.formats.example.ragged import RaggedValues

    Point = collections.namedtuple("Point", "x y")

    def element(i):
        return Point(int(i), {"f": float(i) / 2, "flag": bool(i % 2), "big": np.full(
            20_000, i, np.int32), "ragged": RaggedValues(np.arange(int(i)), np.array(
                [0, int(i)]))})

    ds = fl.Dataset.range(3).map(element).cache(str(tmp_path / "c"))
    first, second = list(ds), list(ds)
    for a, b in zip(first, second):
        # A map's Python numbers are NumPy scalars of tf.data's dtypes; the cache keeps them.
        assert type(b) is Point and type(b.x) is np.int32 and type(b.y["f"]) is np.float32
        assert type(b.y["flag"]) is np.bool_ and b.y["ragged"] == a.y["ragged"]
        assert b.y["big"].dtype == np.int32 and b.y["big"].flags.writeable
    assert_elements_equal(second, first)


def test_changing_elements_downstream_does_not_change_the_cache(tmp_path):
    def in_place(x):
        x += 1  # an array the cache handed on (or read back) changed where it lies
        return x

    ds = fl.Dataset.range(3).map(lambda i: np.full(50_000, i)).cache(str(tmp_path / "c"))
    expected = [np.full(50_000, i + 1) for i in range(3)]
    assert_elements_equal(list(ds.map(in_place)), expected)
    assert_elements_equal(list(ds.map(in_place)), expected)
    assert_elements_equal(list(ds), [np.full(50_000, i) for i in range(3)])


def test_a_partial_cache_is_never_read_and_a_second_writer_is_refused(tmp_path):
    prefix = str(tmp_path / "c")
    counter = Counter()
    ds = fl.Dataset.range(10).map(counter).cache(prefix)
    with iter(ds) as writer:
        assert ints([next(writer) for _ in range(4)]) == [0, 1, 2, 3]
        names = sorted(os.listdir(tmp_path))
        # Written under a temporary name, the lock held; nothing under the cache's name.
        assert names[0] == "c" + CACHE_SUFFIX + ".lock" and len(names) == 2
        assert names[1].startswith("c" + CACHE_SUFFIX + ".tmp-")
        with iter(fl.Dataset.range(10).map(counter).cache(prefix)) as other:  # the same
            with pytest.raises(FileExistsError, match="concurrent caching iterator running: "
                                                      r"the cache lock file .*c\.feedline-cache"
                                                      r"\.lock exists"):
                next(other)
        assert ints(writer) == list(range(4, 10))
    assert sorted(os.listdir(tmp_path)) == ["c" + CACHE_SUFFIX]
    assert counter.calls == 10
    assert ints(fl.Dataset.range(10).map(counter).cache(prefix)) == list(range(10))
    assert counter.calls == 10  # read back


def test_an_iterator_never_read_blocks_no_writer(tmp_path):
    ds = fl.Dataset.range(3).cache(str(tmp_path / "c"))
    with iter(ds) as idle, iter(ds) as reader:
        assert ints(reader) == [0, 1, 2]
        assert ints(idle) == [0, 1, 2]  # found no cache when made: computes, cannot write
    assert sorted(os.listdir(tmp_path)) == ["c" + CACHE_SUFFIX]


def test_a_dead_writers_lock_and_folder_are_taken_over(tmp_path):
    import subprocess
    import sys

    prefix = str(tmp_path / "c")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, timeout=60, check=True)
    pid = int(dead.stdout)
    import socket

    (tmp_path / ("c" + CACHE_SUFFIX + ".lock")).write_text(
        json.dumps({"host": socket.gethostname(), "pid": pid}))
    (tmp_path / ("c" + CACHE_SUFFIX + f".tmp-{pid}-abc")).mkdir()
    assert ints(fl.Dataset.range(3).cache(prefix)) == [0, 1, 2]
    assert sorted(os.listdir(tmp_path)) == ["c" + CACHE_SUFFIX]


def test_damaged_file_cache(tmp_path):
    ds = fl.Dataset.range(3).cache(str(tmp_path / "c"))
    ints(ds)
    chunk = tmp_path / ("c" + CACHE_SUFFIX) / "shard-00000" / "chunk-00000.flchunk"
    _replace(chunk, chunk.read_bytes()[:-3])
    with pytest.raises(fl.DataLossError, match="chunk-00000.flchunk: the chunk is truncated") \
            as info:
        list(fl.Dataset.range(3).cache(str(tmp_path / "c")))
    assert info.value.path == str(chunk)
    (tmp_path / ("c" + CACHE_SUFFIX) / "dataset.json").unlink()
    with pytest.raises(fl.DataLossError, match="not a complete feedline cache: it has no "
                                               "dataset.json"):
        fl.Dataset.range(3).cache(str(tmp_path / "c"))._make_iterator(IteratorContext())
    shutil.rmtree(tmp_path / ("c" + CACHE_SUFFIX))
    (tmp_path / ("c" + CACHE_SUFFIX)).write_bytes(b"not a cache\n")
    with pytest.raises(fl.DataLossError, match="is not a feedline cache"):
        list(fl.Dataset.range(3).cache(str(tmp_path / "c")))
    assert (tmp_path / ("c" + CACHE_SUFFIX)).read_bytes() == b"not a cache\n"  # left alone


def test_an_old_json_lines_cache_file_is_replaced(tmp_path, caplog):
    path = tmp_path / ("c" + CACHE_SUFFIX)
    path.write_bytes(b'{"feedline_cache":2,"pipeline":{}}\n#end 0 00000000\n')
    with caplog.at_level(logging.WARNING, logger="feedline.transforms.cache"):
        assert ints(fl.Dataset.range(3).cache(str(tmp_path / "c"))) == [0, 1, 2]
    assert "cache file of an older feedline" in caplog.text
    assert path.is_dir() and ints(fl.Dataset.range(3).cache(str(tmp_path / "c"))) == [0, 1, 2]


# ----------------------------------------------------------------------------- damage and hostility
def _replace(path, data):
    """Replace a file as a copy does (a new file: one being read stays mapped intact)."""
    from feedline.snapshot.chunks import write_file

    write_file(str(path), data)


def _complete_cache(tmp_path, monkeypatch, n=100):
    from feedline.transforms import cache

    monkeypatch.setattr(cache, "ROUND_BYTES", 150)  # about 12 elements a chunk
    prefix = str(tmp_path / "c")
    assert ints(fl.Dataset.range(n).cache(prefix)) == list(range(n))
    chunks = sorted((tmp_path / ("c" + CACHE_SUFFIX) / "shard-00000").iterdir())
    assert len(chunks) >= n // 20
    return prefix, chunks


def test_a_file_cache_of_several_chunks_checkpoints(tmp_path, monkeypatch):
    prefix, _ = _complete_cache(tmp_path, monkeypatch, 30)
    check_checkpointing(fl.Dataset.range(30).cache(prefix), steps=[0, 1, 11, 12, 13, 29, 30])
    check_checkpointing(fl.Dataset.range(30).cache(prefix).batch(4),
                        steps=[0, 1, 3, 7, 8])


def test_restoring_past_the_end_of_the_cache_is_a_checkpoint_error(tmp_path):
    prefix = str(tmp_path / "c")
    ints(fl.Dataset.range(3).cache(prefix))
    with iter(fl.Dataset.range(3).cache(prefix)) as it:
        state = json.loads(json.dumps(it.state_dict()))
    state["root"]["position"] = 4
    with iter(fl.Dataset.range(3).cache(prefix)) as it, pytest.raises(fl.CheckpointError):
        it.load_state_dict(state)


def test_a_deleted_chunk_is_data_loss(tmp_path, monkeypatch):
    prefix, chunks = _complete_cache(tmp_path, monkeypatch)
    chunks[2].unlink()
    got = []
    with pytest.raises(fl.DataLossError, match="chunk 2 is missing"):
        for x in fl.Dataset.range(100).cache(prefix):
            got.append(int(x))
    assert got == list(range(len(got))) and got


def test_swapped_or_copied_chunks_are_data_loss(tmp_path, monkeypatch):
    prefix, chunks = _complete_cache(tmp_path, monkeypatch)
    a, b = chunks[1].read_bytes(), chunks[3].read_bytes()
    _replace(chunks[1], b)
    _replace(chunks[3], a)
    with pytest.raises(fl.DataLossError, match=r"chunk-00001.flchunk: expected chunk 1 of shard 0 "
                                               r"of store [0-9a-f]+, found chunk 3 of shard 0"):
        list(fl.Dataset.range(100).cache(prefix))
    _replace(chunks[3], b)  # a copy of chunk 3 over chunk 1
    with pytest.raises(fl.DataLossError, match="chunk-00001.flchunk: expected chunk 1 "):
        list(fl.Dataset.range(100).cache(prefix))


def test_a_changed_byte_is_data_loss(tmp_path, monkeypatch):
    prefix, chunks = _complete_cache(tmp_path, monkeypatch)
    data = bytearray(chunks[4].read_bytes())
    data[-2] ^= 0x01  # in the last element's value: a valid element, the wrong value
    _replace(chunks[4], bytes(data))
    with pytest.raises(fl.DataLossError, match="chunk-00004.flchunk: the chunk's checksum"):
        list(fl.Dataset.range(100).cache(prefix))


def test_a_cache_file_of_another_pipeline_is_never_read(tmp_path, caplog):
    prefix = str(tmp_path / "c")
    assert ints(fl.Dataset.range(5).cache(prefix)) == list(range(5))
    calls = []

    def times_ten(x):
        calls.append(x)
        return x * 10

    other = fl.Dataset.range(5).map(times_ten).cache(prefix)
    assert ints(other) == [0, 10, 20, 30, 40] and len(calls) == 5
    assert "written by a different pipeline" in caplog.text and "MapDataset" in caplog.text
    # The file now holds the new pipeline's cache (a rebuilt, equal pipeline reads it) ...
    again = fl.Dataset.range(5).map(times_ten).cache(prefix)
    assert ints(again) == [0, 10, 20, 30, 40] and len(calls) == 5
    # ... and a changed function is another pipeline.
    assert ints(fl.Dataset.range(5).map(lambda x: x * 11).cache(prefix)) == [0, 11, 22, 33, 44]
    assert ints(fl.Dataset.range(5).cache(prefix)) == [0, 1, 2, 3, 4]


def test_a_hostile_cache_file_runs_nothing(tmp_path):
    import collections

    from feedline.snapshot.chunks import ChunkBuilder, chunk_parts, crc32c, header_checksum

    Point = collections.namedtuple("Point", "x y")
    prefix = str(tmp_path / "c")
    ds = fl.Dataset.from_tensors(Point(np.int64(1), np.int64(2))).cache(prefix)
    assert list(ds) == [Point(1, 2)] and type(list(ds)[0]) is Point
    folder = tmp_path / ("c" + CACHE_SUFFIX)
    manifest = json.loads((folder / "dataset.json").read_text())
    chunk = folder / "shard-00000" / "chunk-00000.flchunk"
    marker = tmp_path / "pwned"
    fields = {"store": manifest["store_id"], "shard": 0, "chunk": 0}
    for hostile, outcome in (
            ({"nt": "os:system", "f": ["command"], "v": [{"u": f"touch {marker}"}]},
             "a namedtuple named system, nothing more"),
            ({"o": "os:system", "v": f"touch {marker}"}, "data loss"),
            ({"nt": "subprocess:getoutput", "v": [{"u": f"touch {marker}"}]}, "data loss")):
        # An element of one leaf of kind "j" (a value the state codec decodes), checksums right.
        builder = ChunkBuilder("NONE")
        builder.add(1)
        [frame] = builder.close()
        text = json.dumps(hostile).encode()
        frame.parts = [b"j" + len(text).to_bytes(8, "little") + text]
        frame.packed = frame.raw = len(frame.parts[0])
        frame.crc = crc32c(frame.parts[0])
        parts = chunk_parts([frame], "NONE", builder.structure, fields)
        _replace(chunk, b"".join(bytes(p) for p in parts))
        manifest["checksums"]["0"] = [header_checksum(parts)]
        _replace(folder / "dataset.json", json.dumps(manifest).encode())
        again = fl.Dataset.from_tensors(Point(np.int64(1), np.int64(2))).cache(prefix)
        if outcome == "data loss":
            with pytest.raises(fl.DataLossError, match="chunk-00000.flchunk, element 0: damaged"):
                list(again)
        else:
            [made_up] = list(again)
            assert type(made_up).__name__ == "system" and made_up.command == b"" or \
                made_up.command == f"touch {marker}"
        assert not marker.exists()


# ----------------------------------------------------------------------------- after the end
@pytest.mark.parametrize("filename", ["", "c"])
def test_a_partial_last_batch_replays_the_cache_every_epoch(tmp_path, filename):
    # batch asks its input again after the end (the partial last batch): the cache must end
    # again, never report damage (issue 26: "damaged cache record 10 ... found 10").
    prefix = str(tmp_path / filename) if filename else ""
    ds = fl.Dataset.range(10).cache(prefix).batch(4).repeat(3)
    assert [b.tolist() for b in ds] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] * 3
    assert [b.tolist() for b in ds] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] * 3


@pytest.mark.parametrize("filename", ["", "c"])
def test_next_after_the_end_ends_again_forever(tmp_path, filename):
    prefix = str(tmp_path / filename) if filename else ""
    ds = fl.Dataset.range(3).cache(prefix)
    for _ in range(2):  # the pass that fills the cache, then one that replays it
        with iter(ds) as it:
            assert ints(it) == [0, 1, 2]
            for _ in range(3):
                with pytest.raises(StopIteration):
                    next(it)


def test_a_memory_cache_is_complete_at_the_inputs_known_cardinality():
    # tf.data (MemoryCacheTest.testCacheKnownCardinality): reading every element, without
    # asking for the end, completes the cache; the next pass replays the same order.
    ds = fl.Dataset.range(10).shuffle(10, seed=3, reshuffle_each_iteration=True).cache()
    with iter(ds) as it:
        first = ints([next(it) for _ in range(10)])
    assert sorted(first) == list(range(10)) and ints(ds) == first
    unknown = fl.Dataset.range(10).filter(lambda x: True).cache()
    with iter(unknown) as it:
        [next(it) for _ in range(10)]
    assert unknown._store.elements is None  # cardinality unknown: only the end completes it


def test_a_state_taken_while_replaying_refills_the_same_order_where_the_cache_is_not():
    # The cache holds epoch 0's shuffle; a new dataset object (another process) has no
    # cache, and must fill it with epoch 0's order again, not the shuffle's next epoch.
    def make():
        return fl.Dataset.range(30).shuffle(7, seed=5).cache().repeat(2)

    it = iter(make())
    first = [int(next(it)) for _ in range(35)]  # into the second epoch: replaying
    state = it.state_dict()
    rest = [int(x) for x in it]
    assert first[30:] + rest == first[:30]  # the cache replays epoch 0
    again = iter(make())
    again.load_state_dict(state)
    assert [int(x) for x in again] == rest
