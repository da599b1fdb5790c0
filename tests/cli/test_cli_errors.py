"""The command line's clear errors and tidiness (issue 43): help without reST markup,
``feedline snapshots`` on a missing path and on a crashed writer's lock, ``feedline demo``
removing its sample data."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile

import pytest

import feedline as fl
from feedline.cli.main import main


@pytest.mark.parametrize("command", [[], ["demo"], ["snapshots"], ["profile"]])
def test_help_is_plain_text(command, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: feedline")
    for markup in ("``", ":class:", ":func:", ":mod:", ":meth:"):
        assert markup not in out, (markup, out)
    if not command:
        assert "feedline command line: 'feedline demo' runs a real pipeline" in out


def test_snapshots_of_a_missing_path_fails_with_one_line(tmp_path, capsys):
    missing = tmp_path / "nothing-here"
    assert main(["snapshots", str(missing)]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"feedline snapshots: {missing}: no such folder\n"
    assert captured.out == ""
    a_file = tmp_path / "a-file"
    a_file.write_bytes(b"x")
    assert main(["snapshots", str(a_file)]) == 1
    assert capsys.readouterr().err == f"feedline snapshots: {a_file}: not a folder\n"
    assert main(["snapshots", str(tmp_path)]) == 0  # a folder with no snapshot is no error
    assert capsys.readouterr().out == f"no snapshot under {tmp_path}\n"


def _dead_pid() -> int:
    """The pid of a process that has ended (and been waited for)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=60)
    return process.pid


def _lock(folder, pid: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "writer.lock").write_text(json.dumps({"host": socket.gethostname(), "pid": pid}))


@pytest.mark.timeout(60)
def test_snapshots_report_a_crashed_writer_s_lock_as_unfinished(tmp_path, capsys):
    # A write stopped after some commits, whose writer died holding the lock (kill -9).
    from feedline.transforms.snapshot import SnapshotDataset

    with iter(SnapshotDataset(fl.Dataset.range(10_000), str(tmp_path), round_bytes=500)) as it:
        for _ in range(500):
            next(it)
    [stopped] = fl.snapshot_info(str(tmp_path))
    dead = _dead_pid()
    _lock(tmp_path / stopped.fingerprint, dead)
    # Writers that took the lock and committed nothing: one crashed, one alive (this process).
    _lock(tmp_path / "0000crashed000000", dead)
    _lock(tmp_path / "0000live000000000", _this_pid())
    # A lock a writer has created and not yet filled in (read at that moment).
    (tmp_path / "0000taking0000000").mkdir()
    (tmp_path / "0000taking0000000" / "writer.lock").write_bytes(b"")
    entries = {e.fingerprint: e for e in fl.snapshot_info(str(tmp_path))}
    assert {name: (e.status, e.elements, e.compression) for name, e in entries.items()} == {
        "0000crashed000000": ("partial", 0, "-"),
        "0000live000000000": ("writing", 0, "-"),
        "0000taking0000000": ("writing", 0, "-"),
        stopped.fingerprint: ("partial", stopped.elements, "ZSTD"),
    }
    assert entries["0000crashed000000"].writer == {"host": socket.gethostname(), "pid": dead}
    assert main(["snapshots", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:3] == ["0000crashed000000", "partial", "0"]
    assert lines[2].split()[:3] == ["0000live000000000", "writing", "0"]
    assert main(["snapshots", str(tmp_path), "--remove-partial"]) == 0
    assert sorted(e.fingerprint for e in fl.snapshot_info(str(tmp_path))) == [
        "0000live000000000", "0000taking0000000"]


def _this_pid() -> int:
    import os

    return os.getpid()


@pytest.mark.timeout(120)
def test_demo_removes_its_sample_data(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["demo", "--records", "200", "--files", "2", "--batch-size", "64"]) == 0
    out = capsys.readouterr().out
    assert "produced the same next batch" in out
    assert "removed the sample data in " in out
    assert list(tmp_path.glob("feedline-demo-*")) == []
