"""Dataset.snapshot: write once, read after; stable fingerprints; crashes; two writers."""

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
from feedline.cli.main import main as cli
from feedline.testing import check_checkpointing
from feedline.testing.elements import assert_elements_equal

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import snapshot_pipelines as pipelines


def xs(elements):
    return [int(e["x"][0]) for e in elements]


@pytest.fixture(autouse=True)
def fresh_calls():
    pipelines.CALLS.clear()


def test_first_iteration_writes_later_ones_read(tmp_path):
    ds = pipelines.pipeline(tmp_path)
    first = list(ds)
    assert xs(first) == list(range(300)) and len(pipelines.CALLS) == 300
    pipelines.CALLS.clear()
    assert_elements_equal(list(ds), first)
    assert_elements_equal(list(pipelines.pipeline(tmp_path)), first)  # another object, too
    assert pipelines.CALLS == []
    [info] = fl.snapshot_info(str(tmp_path), pipelines.upstream())
    assert (info.status, info.elements, info.matches) == ("complete", 300, True)
    assert info.chunks > 5 and info.compression == "ZSTD"


def test_a_changed_pipeline_writes_beside_and_is_explained(tmp_path):
    list(pipelines.pipeline(tmp_path))
    changed = fl.Dataset.range(300).map(pipelines.expensive).map(lambda e: e)
    list(changed.snapshot(str(tmp_path)))
    entries = fl.snapshot_info(str(tmp_path), pipelines.upstream())
    assert len(entries) == 2 and sorted(e.matches for e in entries) == [False, True]
    other = next(e for e in entries if not e.matches)
    assert "stage" in other.difference


def test_the_fingerprint_is_the_same_in_another_process(tmp_path):
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import snapshot_pipelines as p; "
            f"list(p.pipeline({str(tmp_path)!r}))")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert xs(pipelines.pipeline(tmp_path)) == list(range(300))
    assert pipelines.CALLS == []  # read from what the other process wrote


def test_a_stopped_write_resumes_and_recomputes_nothing_committed(tmp_path):
    ds = pipelines.pipeline(tmp_path)
    with iter(ds) as it:
        head = [next(it) for _ in range(120)]
    [info] = fl.snapshot_info(str(tmp_path))
    assert info.status == "partial" and 0 < info.elements <= 120
    with pytest.raises(FileNotFoundError, match="did not finish"):
        fl.Dataset.load(info.path)
    pipelines.CALLS.clear()
    again = list(ds)
    assert xs(again) == list(range(300)) and xs(head) == list(range(120))
    assert pipelines.CALLS[0] == info.elements  # the committed ones were read back
    assert fl.snapshot_info(str(tmp_path))[0].status == "complete"


def test_checkpoint_while_writing_restores_exactly(tmp_path):
    ds = pipelines.pipeline(tmp_path)
    it = iter(ds)
    head = [next(it) for _ in range(77)]
    state = json.loads(json.dumps(it.state_dict()))
    it.close()
    with iter(pipelines.pipeline(tmp_path)) as restored:
        restored.load_state_dict(state)
        rest = list(restored)
    assert xs(head + rest) == list(range(300))
    assert xs(pipelines.pipeline(tmp_path)) == list(range(300))  # complete and exact


def test_reading_checkpoints(tmp_path):
    ds = pipelines.pipeline(tmp_path, count=40)
    list(ds)
    check_checkpointing(ds, constant_state_size=True)


def test_two_iterations_at_once_one_writes(tmp_path):
    ds = pipelines.pipeline(tmp_path)
    writer, other = iter(ds), iter(ds)
    a = [next(writer) for _ in range(10)]
    b = list(other)  # finds the lock held: computes without writing
    a += list(writer)
    writer.close()
    other.close()
    assert xs(a) == xs(b) == list(range(300))
    [info] = fl.snapshot_info(str(tmp_path))
    assert info.status == "complete" and info.elements == 300


def test_the_second_iteration_reads_what_the_writer_committed(tmp_path):
    ds = pipelines.pipeline(tmp_path)
    writer = iter(ds)
    head = [next(writer) for _ in range(150)]  # several rounds committed, lock held
    [info] = fl.snapshot_info(str(tmp_path))
    committed = info.elements
    assert info.status == "writing" and 0 < committed <= 150
    pipelines.CALLS.clear()
    with iter(ds) as other:
        rest = list(other)
    assert xs(rest) == list(range(300))
    # The committed rounds were read back, not computed: the first call is the element
    # after them.
    assert pipelines.CALLS[0] == committed
    writer_rest = list(writer)
    writer.close()
    assert xs(head + writer_rest) == list(range(300))
    assert fl.snapshot_info(str(tmp_path))[0].status == "complete"


def test_remove_partial_and_the_command(tmp_path, capsys):
    with iter(pipelines.pipeline(tmp_path)) as it:
        for _ in range(100):
            next(it)
    list(fl.Dataset.range(3).snapshot(str(tmp_path)))
    assert cli(["snapshots", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "partial" in out and "complete" in out
    assert cli(["snapshots", str(tmp_path), "--remove-partial"]) == 0
    assert "removed" in capsys.readouterr().out
    assert [e.status for e in fl.snapshot_info(str(tmp_path))] == ["complete"]


@pytest.mark.parametrize("compression", [None, "GZIP", "LZ4"])
def test_compressions(tmp_path, compression):
    ds = fl.Dataset.range(20).map(lambda x: np.full(5, x)).snapshot(str(tmp_path), compression)
    assert [int(b[0]) for b in ds] == [int(b[0]) for b in ds] == list(range(20))
    assert fl.snapshot_info(str(tmp_path))[0].compression == (compression or "NONE")


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(3))
def test_kill_9_during_a_snapshot_then_exact(tmp_path, trial):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    process = subprocess.Popen(
        [sys.executable, "-c", f"import snapshot_pipelines as p; p.write({str(tmp_path)!r})"],
        env=env)
    try:
        deadline = time.monotonic() + 60
        wanted = (1, 100, 250)[trial]
        while time.monotonic() < deadline and process.poll() is None:
            entries = fl.snapshot_info(str(tmp_path))
            if entries and entries[0].elements >= wanted:
                break
            time.sleep(0.01)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    got = list(pipelines.pipeline(tmp_path, pipelines.slow, count=2000))
    assert xs(got) == list(range(2000))
    assert xs(pipelines.pipeline(tmp_path, pipelines.slow, count=2000)) == list(range(2000))
    assert fl.snapshot_info(str(tmp_path))[0].status == "complete"


def test_changed_input_files_make_a_new_snapshot(tmp_path):
    data = tmp_path / "data.tfrecord"
    fl.write_tfrecord(fl.Dataset.from_tensor_slices([b"a", b"b"]), str(data))
    upstream = fl.TFRecordDataset(str(data)).map(lambda r: r + b"!")
    snapshots = tmp_path / "snapshots"
    assert list(upstream.snapshot(str(snapshots))) == [b"a!", b"b!"]
    os.utime(data, ns=(1, 1))  # rewritten (here: touched) after the snapshot
    fl.write_tfrecord(fl.Dataset.from_tensor_slices([b"c"]), str(data))
    changed = fl.TFRecordDataset(str(data)).map(lambda r: r + b"!")
    assert list(changed.snapshot(str(snapshots))) == [b"c!"]  # never the stale data
    entries = fl.snapshot_info(str(snapshots), changed)
    assert len(entries) == 2
    stale = next(e for e in entries if not e.matches)
    assert "input files changed" in stale.difference and "data.tfrecord" in stale.difference


def test_a_state_taken_while_computing_restores_into_a_complete_snapshot(tmp_path):
    ds = pipelines.pipeline(tmp_path)
    writer, other = iter(ds), iter(ds)
    next(writer)  # holds the lock: `other` computes
    head = [next(other) for _ in range(50)]
    state = other.state_dict()
    other.close()
    list(writer)  # the snapshot is complete now
    writer.close()
    with iter(pipelines.pipeline(tmp_path)) as restored:
        restored.load_state_dict(state)  # produced 50 while computing; now it reads
        rest = list(restored)
    assert xs(head + rest) == list(range(300))


def test_swapped_or_copied_chunks_of_a_snapshot_are_data_loss(tmp_path):
    # Issue 29.4: they read back as elements in the wrong order, duplicates and holes.
    from feedline.snapshot.chunks import write_file

    ds = pipelines.pipeline(tmp_path)
    expected = xs(list(ds))
    [info] = fl.snapshot_info(str(tmp_path))
    first, second = (Path(info.path) / "shard-00000" / f"chunk-0000{i}.flchunk" for i in (1, 3))
    a, b = first.read_bytes(), second.read_bytes()
    write_file(str(first), b)
    write_file(str(second), a)
    with pytest.raises(fl.DataLossError, match=r"chunk-00001.flchunk: expected chunk 1 of shard 0 "
                                               r"of store [0-9a-f]+, found chunk 3 of shard 0"):
        list(ds)
    write_file(str(second), b)  # a copy of chunk 3 over chunk 1
    with pytest.raises(fl.DataLossError, match="chunk-00001.flchunk: expected chunk 1 .*found "
                                               "chunk 3"):
        list(ds)
    write_file(str(first), a)
    assert xs(list(ds)) == expected


def test_a_reader_of_a_snapshot_being_written_checks_its_chunks(tmp_path):
    from feedline.snapshot.chunks import write_file

    ds = pipelines.pipeline(tmp_path)
    with iter(ds) as writer:
        for _ in range(150):
            next(writer)  # several rounds committed, the lock held
        [info] = fl.snapshot_info(str(tmp_path))
        chunk = Path(info.path) / "shard-00000" / "chunk-00000.flchunk"
        write_file(str(chunk), (chunk.parent / "chunk-00001.flchunk").read_bytes())
        with pytest.raises(fl.DataLossError, match="chunk-00000.flchunk: expected chunk 0 "):
            list(ds)
