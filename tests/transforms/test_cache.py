import json
import logging
import os
import pickle

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


def test_damaged_file_cache(tmp_path):
    ds = fl.Dataset.range(3).cache(str(tmp_path / "c"))
    ints(ds)
    path = tmp_path / ("c" + CACHE_SUFFIX)
    path.write_bytes(path.read_bytes()[:-3])
    # A truncated file is refused before any element comes out.
    with pytest.raises(fl.DataLossError, match="truncated or damaged") as info:
        fl.Dataset.range(3).cache(str(tmp_path / "c"))._make_iterator(IteratorContext())
    assert info.value.path == str(path)
    path.write_bytes(b"not a cache\n")
    with pytest.raises(fl.DataLossError, match="not a feedline cache file"):
        list(fl.Dataset.range(3).cache(str(tmp_path / "c")))


# ----------------------------------------------------------------------------- damage and hostility
def _complete_cache(tmp_path, n=100):
    prefix = str(tmp_path / "c")
    assert ints(fl.Dataset.range(n).cache(prefix)) == list(range(n))
    return prefix, tmp_path / ("c" + CACHE_SUFFIX)


def _records(path):
    lines = path.read_bytes().split(b"\n")
    return lines[0], lines[1:-2], lines[-2]  # header, records, footer


def test_deleting_a_record_is_data_loss_at_that_record(tmp_path):
    prefix, path = _complete_cache(tmp_path)
    header, records, footer = _records(path)
    del records[40]
    path.write_bytes(b"\n".join([header, *records, footer]) + b"\n")
    it = iter(fl.Dataset.range(100).cache(prefix))
    assert ints([next(it) for _ in range(40)]) == list(range(40))
    with pytest.raises(fl.DataLossError, match="damaged cache record 40 at byte .*checksum") as info:
        next(it)
    assert info.value.record_index == 40 and info.value.path == str(path)


def test_deleting_the_last_records_is_data_loss_before_any_element(tmp_path):
    prefix, path = _complete_cache(tmp_path)
    header, records, footer = _records(path)
    path.write_bytes(b"\n".join([header, *records[:98]]) + b"\n")
    with pytest.raises(fl.DataLossError, match="truncated or damaged"):
        next(iter(fl.Dataset.range(100).cache(prefix)))
    # A forged footer with the wrong count does not hide the loss either.
    path.write_bytes(b"\n".join([header, *records[:98], footer]) + b"\n")
    it = iter(fl.Dataset.range(100).cache(prefix))
    assert len([next(it) for _ in range(98)]) == 98
    with pytest.raises(fl.DataLossError, match="expected 100 records, found 98"):
        next(it)


def test_a_changed_byte_is_data_loss(tmp_path):
    prefix, path = _complete_cache(tmp_path)
    data = bytearray(path.read_bytes())
    position = data.index(b'"v":57')
    data[position + 5] = ord("8")  # 57 -> 58, a valid record with the wrong value
    path.write_bytes(bytes(data))
    with pytest.raises(fl.DataLossError, match="record 57 .*checksum"):
        list(fl.Dataset.range(100).cache(prefix))


def test_a_cache_file_of_another_pipeline_is_never_read(tmp_path, caplog):
    prefix, _ = _complete_cache(tmp_path, 5)
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
    import json as json_module

    from feedline.transforms.cache import _record_checksum

    Point = collections.namedtuple("Point", "x y")
    prefix = str(tmp_path / "c")
    ds = fl.Dataset.from_tensors(Point(np.int64(1), np.int64(2))).cache(prefix)
    assert list(ds) == [Point(1, 2)]
    path = tmp_path / ("c" + CACHE_SUFFIX)
    header, _, _ = _records(path)
    marker = tmp_path / "pwned"
    for hostile in ({"nt": "os:system", "f": ["command"], "v": [{"u": f"touch {marker}"}]},
                    {"o": "os:system", "v": f"touch {marker}"},
                    {"nt": "subprocess:getoutput", "v": [{"u": f"touch {marker}"}]}):
        payload = json_module.dumps(hostile, separators=(",", ":")).encode()
        record = _record_checksum(0, payload).encode() + b" " + payload
        from feedline.transforms.cache import _footer

        path.write_bytes(header + b"\n" + record + b"\n" + _footer(header + b"\n", 1))
        with pytest.raises(fl.DataLossError, match="record 0"):
            list(fl.Dataset.from_tensors(Point(np.int64(1), np.int64(2))).cache(prefix))
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
