"""Dataset.save / Dataset.load: every structure round-trips; crashes resume; damage is named."""

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline.testing import check_checkpointing
from feedline.testing.elements import assert_elements_equal

Point = collections.namedtuple("Point", "x y")
ROOT = Path(__file__).resolve().parents[2]


def root(folder):
    """The folder holding the chunks of the save at ``folder`` (the one its manifest names)."""
    return Path(folder) / json.loads((Path(folder) / "dataset.json").read_text())["root"]


def partial(folder):
    """The ``progress.json`` of the partial save in ``folder``."""
    [progress] = Path(folder).glob("save-*/progress.json")
    return progress


def element(i):
    return {"id": np.int64(i), "point": Point(np.float32(i) / 2, np.arange(i % 3, dtype=np.int16)),
            "raw": b"r" * int(i), "names": np.array([b"a" * int(i), b""], dtype=object),
            "flag": np.bool_(i % 2), "text": str(i) * 2, "empty": np.zeros((0, 3), np.uint8)}


@pytest.mark.parametrize("compression", [None, "AUTO", "ZSTD", "GZIP", "LZ4"])
def test_every_structure_round_trips(tmp_path, compression):
    ds = fl.Dataset.range(7).map(element)
    ds.save(str(tmp_path), compression=compression)
    loaded = fl.Dataset.load(str(tmp_path))
    assert loaded.cardinality() == 7
    got = list(loaded)
    assert_elements_equal(got, list(ds))
    assert type(got[0]["point"]).__name__ == "Point" and got[0]["point"]._fields == ("x", "y")
    assert got[3]["names"].dtype == object and got[3]["text"] == b"33"  # str leaves are bytes
    assert got[4]["point"].y.flags.writeable


def test_load_checks_what_it_is_given(tmp_path):
    fl.Dataset.range(3).save(str(tmp_path), compression="GZIP")
    with pytest.raises(ValueError, match="saved with GZIP compression, not ZSTD"):
        fl.Dataset.load(str(tmp_path), compression="ZSTD")
    with pytest.raises(ValueError, match="holds elements of spec"):
        fl.Dataset.load(str(tmp_path), element_spec=fl.TensorSpec((2,), np.float32))
    assert list(fl.Dataset.load(str(tmp_path), element_spec=fl.TensorSpec((), np.int64))) \
        == [0, 1, 2]
    with pytest.raises(FileNotFoundError, match="no saved dataset"):
        fl.Dataset.load(str(tmp_path / "nothing"))


def test_shards_and_reader_func(tmp_path):
    ds = fl.Dataset.range(10)
    ds.save(str(tmp_path), shard_func=lambda x: x % 3)
    assert sorted(os.listdir(root(tmp_path))) == ["dataset.json", "shard-00000", "shard-00001",
                                            "shard-00002"]
    assert [int(x) for x in fl.Dataset.load(str(tmp_path))] == [0, 3, 6, 9, 1, 4, 7, 2, 5, 8]

    def interleaved(shards):
        return fl.Dataset.range(len(shards)).interleave(lambda i: shards[int(i)],
                                                        cycle_length=len(shards))

    assert [int(x) for x in fl.Dataset.load(str(tmp_path), reader_func=interleaved)] == \
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    with pytest.raises(TypeError, match="shard_func must return an integer"):
        ds.save(str(tmp_path / "bad"), shard_func=lambda x: "a")


def test_saving_replaces_a_complete_save(tmp_path):
    fl.Dataset.range(3).save(str(tmp_path))
    fl.Dataset.range(5, 7).save(str(tmp_path))
    assert [int(x) for x in fl.Dataset.load(str(tmp_path))] == [5, 6]


def test_remote_paths(tmp_path):
    url = "memory://save-test/ds"
    try:
        fl.Dataset.range(4).map(lambda x: np.full(3, x)).save(url, compression="AUTO")
        assert [b.tolist() for b in fl.Dataset.load(url)][-1] == [3, 3, 3]
        fl.Dataset.range(2).save(url)  # replaced: the old copy's folder goes
        assert [int(x) for x in fl.Dataset.load(url)] == [0, 1]
        import fsspec

        names = sorted(p.rsplit("/", 1)[-1] for p in fsspec.filesystem("memory").ls(
            "/save-test/ds", detail=False))
        assert len(names) == 2 and names[0] == "dataset.json" and names[1].startswith("save-")
    finally:
        import fsspec

        fsspec.filesystem("memory").rm("/save-test", recursive=True)


def test_damaged_chunks_name_the_file(tmp_path):
    fl.Dataset.range(100).save(str(tmp_path), checkpoint_args={"checkpoint_interval": 200})
    chunk = root(tmp_path) / "shard-00000" / "chunk-00002.flchunk"
    data = bytearray(chunk.read_bytes())
    data[-3] ^= 0xFF
    chunk.write_bytes(bytes(data))
    it = iter(fl.Dataset.load(str(tmp_path)))
    got = []
    with pytest.raises(fl.DataLossError, match="chunk-00002.flchunk: the chunk's checksum"):
        for x in it:
            got.append(int(x))
    assert got == list(range(len(got))) and len(got) > 0
    it.close()
    (root(tmp_path) / "shard-00000" / "chunk-00001.flchunk").unlink()
    with pytest.raises(fl.DataLossError, match="chunk 1 is missing"):
        list(fl.Dataset.load(str(tmp_path)))


def test_load_checkpoints(tmp_path):
    fl.Dataset.range(30).map(lambda x: (x, str(x))).save(
        str(tmp_path), checkpoint_args={"checkpoint_interval": 100})
    assert len(os.listdir(root(tmp_path) / "shard-00000")) > 3
    check_checkpointing(fl.Dataset.load(str(tmp_path)), constant_state_size=True)


FAIL_AT = {"at": None}
CALLS = []


def crashing(x):
    CALLS.append(int(x))
    if FAIL_AT["at"] is not None and int(x) == FAIL_AT["at"]:
        raise KeyboardInterrupt  # the process "dies" here
    return np.full(10, x, dtype=np.int64)


def test_a_crashed_save_resumes_after_its_last_committed_round(tmp_path):
    ds = fl.Dataset.range(200).map(crashing)
    FAIL_AT["at"], CALLS[:] = 150, []
    with pytest.raises(KeyboardInterrupt):
        ds.save(str(tmp_path), checkpoint_args={"checkpoint_interval": 2000})
    progress = json.loads(partial(tmp_path).read_text())
    committed = progress["elements"]
    assert 0 < committed <= 150 and not (tmp_path / "dataset.json").exists()
    with pytest.raises(FileNotFoundError, match="incomplete save.*did not finish"):
        fl.Dataset.load(str(tmp_path))
    FAIL_AT["at"], CALLS[:] = None, []
    ds.save(str(tmp_path), checkpoint_args={"checkpoint_interval": 2000})
    assert CALLS[0] == committed  # nothing before the committed rounds is computed again
    assert [int(b[0]) for b in fl.Dataset.load(str(tmp_path))] == list(range(200))


def test_a_partial_save_of_another_pipeline_is_refused(tmp_path):
    FAIL_AT["at"] = 100
    try:
        with pytest.raises(KeyboardInterrupt):
            fl.Dataset.range(200).map(crashing).save(
                str(tmp_path), checkpoint_args={"checkpoint_interval": 500})
    finally:
        FAIL_AT["at"] = None
    with pytest.raises(fl.CheckpointError, match="partial write of another pipeline"):
        fl.Dataset.range(5).save(str(tmp_path))


HERE = Path(__file__).resolve().parent


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(3))
def test_kill_9_during_save_then_resume_is_exact(tmp_path, trial, monkeypatch):
    folder = tmp_path / f"saved-{trial}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    process = subprocess.Popen(
        [sys.executable, "-c", f"import slow_writer; slow_writer.main({str(folder)!r})"],
        env=env)
    try:
        deadline = time.monotonic() + 60
        wait_for = (1, 40, 90)[trial]  # rounds committed before the kill (of about 110)
        while time.monotonic() < deadline:
            progress = next(folder.glob("save-*/progress.json"), folder / "none")
            if progress.exists():
                try:
                    if json.loads(progress.read_text())["rounds"] >= wait_for:
                        break
                except ValueError:
                    pass
            if process.poll() is not None:
                break
            time.sleep(0.01)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    monkeypatch.syspath_prepend(str(HERE))
    import slow_writer

    slow_writer.main(str(folder))  # resumes the killed write
    got = list(fl.Dataset.load(str(folder)))
    assert [int(e["x"][0]) for e in got] == list(range(slow_writer.ELEMENTS))
    assert [e["tag"] for e in got[:3]] == [b"0", b"1", b"2"]
    assert not list(folder.rglob(".tmp-*"))


def test_ignore_errors_skips_a_damaged_chunk(tmp_path):
    fl.Dataset.range(100).save(str(tmp_path), checkpoint_args={"checkpoint_interval": 200})
    chunk = root(tmp_path) / "shard-00000" / "chunk-00001.flchunk"
    data = bytearray(chunk.read_bytes())
    data[-3] ^= 0xFF
    chunk.write_bytes(bytes(data))
    got = [int(x) for x in fl.Dataset.load(str(tmp_path)).ignore_errors()]
    assert got[0] == 0 and 0 < len(got) < 100 and got == sorted(got)
    missing = sorted(set(range(100)) - set(got))
    assert missing == list(range(missing[0], missing[-1] + 1))  # exactly one chunk's worth


# ----------------------------------------------------------------------------- swapped or copied chunks
def _put(path, data):
    """Replace a chunk file as a copy does (a new file: one being read stays mapped intact)."""
    from feedline.snapshot.chunks import write_file

    write_file(str(path), data)


def _chunk_files(folder):
    return sorted(root(folder).glob("shard-*/chunk-*.flchunk"))


def _saved(folder, n=40, shards=2):
    fl.Dataset.range(n).save(str(folder), shard_func=lambda x: x % shards,
                             checkpoint_args={"checkpoint_interval": 80})
    files = _chunk_files(folder)
    assert len(files) >= 6, files  # several chunks in every shard
    return files


def _load_all(folder):
    return [int(x) for x in fl.Dataset.load(str(folder))]


def test_every_swap_of_two_chunk_files_is_data_loss(tmp_path):
    # Issue 29.4: swapped chunk files read back as valid data, elements in the wrong order.
    files = _saved(tmp_path)
    originals = {f: f.read_bytes() for f in files}
    expected = _load_all(tmp_path)
    for i, a in enumerate(files):
        for b in files[i + 1:]:
            _put(a, originals[b])
            _put(b, originals[a])
            with pytest.raises(fl.DataLossError, match=r"chunk-\d+\.flchunk: expected chunk "
                                                       r"\d+ of shard \d+ of store [0-9a-f]+, "
                                                       r"found chunk") as raised:
                _load_all(tmp_path)
            assert raised.value.path in (str(a), str(b))
            _put(a, originals[a])
            _put(b, originals[b])
    assert _load_all(tmp_path) == expected


def test_every_copy_of_a_chunk_file_over_another_is_data_loss(tmp_path):
    # Issue 29.4: copies read back as duplicates and holes.
    files = _saved(tmp_path)
    originals = {f: f.read_bytes() for f in files}
    for source in files:
        for target in files:
            if source == target:
                continue
            _put(target, originals[source])
            with pytest.raises(fl.DataLossError, match="a chunk file swapped with or copied "
                                                       "over another") as raised:
                _load_all(tmp_path)
            assert raised.value.path == str(target)
            assert f"expected chunk {int(target.stem[-5:])} of shard " \
                   f"{int(target.parent.name[-5:])}" in str(raised.value)
            _put(target, originals[target])


def test_a_chunk_of_another_store_is_data_loss(tmp_path):
    _saved(tmp_path / "a")
    _saved(tmp_path / "b")
    chunk = Path("shard-00001") / "chunk-00002.flchunk"
    _put(root(tmp_path / "a") / chunk, (root(tmp_path / "b") / chunk).read_bytes())
    with pytest.raises(fl.DataLossError, match=r"chunk-00002.flchunk: expected chunk 2 of "
                                               r"shard 1 of store [0-9a-f]+, found chunk 2 of "
                                               r"shard 1 of another store"):
        _load_all(tmp_path / "a")


def test_a_chunk_of_another_write_of_the_same_store_is_data_loss(tmp_path):
    from feedline.snapshot.chunks import encode_chunk

    _saved(tmp_path)
    manifest = json.loads((tmp_path / "dataset.json").read_text())
    chunk = root(tmp_path) / "shard-00000" / "chunk-00001.flchunk"
    # Rightly named (store, shard, number), other content: only the manifest's checksum tells.
    fields = {"store": manifest["store_id"], "shard": 0, "chunk": 1}
    _put(chunk, encode_chunk([np.int64(7)], "ZSTD", fields))
    with pytest.raises(fl.DataLossError, match=r"chunk-00001.flchunk: expected chunk 1 of shard "
                                               r"0 of store [0-9a-f]+ with checksum [0-9a-f]{8} "
                                               r"\(as the manifest lists\), found checksum"):
        _load_all(tmp_path)


def test_the_manifest_lists_each_chunks_checksum_and_count(tmp_path):
    from feedline.snapshot.chunks import read_header

    files = _saved(tmp_path)
    manifest = json.loads((tmp_path / "dataset.json").read_text())
    assert manifest["format"] == 2 and len(manifest["store_id"]) == 32
    for path in files:
        shard, number = str(int(path.parent.name[-5:])), int(path.stem[-5:])
        header, _, checksum = read_header(str(path), path.read_bytes())
        assert (header["store"], header["shard"], header["chunk"]) == \
            (manifest["store_id"], int(shard), number)
        assert manifest["checksums"][shard][number] == checksum
        assert manifest["counts"][shard][number] == header["elements"]
    assert sum(map(sum, manifest["counts"].values())) == manifest["elements"] == 40


def _rewrite_manifest(folder, change, checksum=True):
    """Change ``dataset.json``; ``checksum``: recompute its checksum (a manifest consistent
    with itself but wrong, as a buggy writer could leave it), else keep the old one."""
    from feedline.snapshot.store import manifest_checksum

    path = Path(folder) / "dataset.json"
    manifest = json.loads(path.read_text())
    change(manifest)
    if checksum:
        manifest["manifest_checksum"] = manifest_checksum(manifest)
    path.write_text(json.dumps(manifest))


def test_a_manifest_without_checksums_is_data_loss(tmp_path):
    _saved(tmp_path)
    _rewrite_manifest(tmp_path, lambda m: m["checksums"]["1"].pop())
    with pytest.raises(fl.DataLossError, match=r"dataset.json: damaged manifest: expected a "
                                               r"checksum for each of the \d+ chunks of shard 1"):
        fl.Dataset.load(str(tmp_path))


def _fewer_chunks(manifest):
    manifest["shards"]["1"] -= 1  # one chunk less, as if the save stopped before it


def _fewer_chunks_everywhere(manifest):
    manifest["shards"]["1"] -= 1
    manifest["elements"] -= manifest["counts"]["1"].pop()
    manifest["checksums"]["1"].pop()


def _more_elements(manifest):
    manifest["counts"]["0"][0] += 1
    manifest["elements"] += 1


@pytest.mark.parametrize("change, message", [
    (_fewer_chunks, r"shard 1 has \d+ chunks but element counts"),
    (_more_elements, r"chunk-00000.flchunk: expected \d+ elements \(as the manifest lists\), "
                     r"the chunk holds \d+"),
    (lambda m: m.update(root="../elsewhere"), "damaged manifest"),
    (lambda m: m.update(elements="many"), "damaged manifest"),
    (lambda m: m["shards"].update({"-1": 0}), "damaged manifest"),
])
def test_a_manifest_that_disagrees_with_itself_or_its_chunks_is_data_loss(tmp_path, change,
                                                                          message):
    # Issue 41.7's fuzzing: a manifest listing fewer chunks than its checksums read as a
    # shorter, complete dataset.
    _saved(tmp_path)
    _rewrite_manifest(tmp_path, change)
    with pytest.raises(fl.DataLossError, match=message) as raised:
        _load_all(tmp_path)
    assert raised.value.path.endswith((".flchunk", "dataset.json"))


@pytest.mark.parametrize("change", [_fewer_chunks_everywhere, _more_elements,
                                    lambda m: m.update(format=1)])
def test_any_change_to_the_manifest_is_caught_by_its_checksum(tmp_path, change):
    _saved(tmp_path)
    _rewrite_manifest(tmp_path, change, checksum=False)
    with pytest.raises(fl.DataLossError, match="dataset.json: damaged manifest \\(its checksum"):
        fl.Dataset.load(str(tmp_path))


def test_a_save_of_an_older_feedline_still_loads(tmp_path):
    # Its chunks lie beside dataset.json, which names no folder and has no checksum.
    import shutil

    _saved(tmp_path / "new")
    legacy = tmp_path / "legacy"
    shutil.copytree(root(tmp_path / "new"), legacy)
    manifest = json.loads((legacy / "dataset.json").read_text())
    assert "root" not in manifest and "manifest_checksum" not in manifest
    assert _load_all(legacy) == _load_all(tmp_path / "new")
    fl.Dataset.range(3).save(str(legacy))  # replaced: the old layout's files go
    assert _load_all(legacy) == [0, 1, 2]
    assert sorted(os.listdir(legacy)) == ["dataset.json", root(legacy).name]


def test_a_partial_save_of_an_older_format_is_started_again(tmp_path):
    FAIL_AT["at"] = 100
    ds = fl.Dataset.range(200).map(crashing)
    try:
        with pytest.raises(KeyboardInterrupt):
            ds.save(str(tmp_path), checkpoint_args={"checkpoint_interval": 500})
    finally:
        FAIL_AT["at"] = None
    progress = json.loads(partial(tmp_path).read_text())
    progress["format"] = 1  # as an older feedline left it
    partial(tmp_path).write_text(json.dumps(progress))
    CALLS[:] = []
    ds.save(str(tmp_path), checkpoint_args={"checkpoint_interval": 500})
    assert CALLS[0] == 0  # computed again from the start, its old chunks replaced
    assert [int(b[0]) for b in fl.Dataset.load(str(tmp_path))] == list(range(200))


def test_python_scalars_and_library_leaves_round_trip_as_they_are(tmp_path):
    from feedline.formats.example.ragged import RaggedValues

    def element(i):
        i = int(i)
        return {"n": i, "f": i / 2, "b": bool(i % 2), "big": 2**40 + i,
                "ragged": RaggedValues(np.arange(i, dtype=np.int64), np.array([0, i])),
                "mixed": np.array([i, b"x"], dtype=object)}

    ds = fl.Dataset.range(3).map(element)
    ds.save(str(tmp_path))
    got = list(fl.Dataset.load(str(tmp_path)))
    assert_elements_equal(got, list(ds))
    # A map's Python numbers are NumPy scalars of tf.data's dtypes; they come back as such.
    assert [type(got[1][k]) for k in ("n", "f", "b", "big")] == [
        np.int32, np.float32, np.bool_, np.int64]
    assert got[2]["big"] == 2**40 + 2 and got[2]["ragged"] == element(2)["ragged"]
    assert got[1]["mixed"].tolist() == [1, b"x"]


def test_a_leaf_that_cannot_be_saved_is_named(tmp_path):
    from feedline.snapshot.codec import element_parts

    with pytest.raises(TypeError, match="cannot save a leaf of type object"):
        element_parts((np.int64(1), object()))
