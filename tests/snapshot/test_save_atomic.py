"""Dataset.save replaces a saved dataset atomically: a save SIGKILLed at any step leaves the
old complete copy or the new one, never a manifest with chunks missing (issue 41.7)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import feedline as fl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import save_kill_points as points  # noqa: E402


def run_killed(folder, which, point):
    """Save pipeline ``which`` in a child process that SIGKILLs itself at ``point``; returns
    once the child has ended (its exit status proves how)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    done = subprocess.run([sys.executable, str(HERE / "save_kill_points.py"), str(folder),
                           which, point], env=env, timeout=120, capture_output=True, text=True)
    expected = 0 if point == "none" else -signal.SIGKILL
    assert done.returncode == expected, done.stderr[-2000:]


def tags(folder):
    with iter(fl.Dataset.load(str(folder))) as it:
        return [e["tag"] for e in it]


OLD = [b"old%d" % i for i in range(40)]
NEW = [b"new%d" % i for i in range(60)]


def assert_no_leftovers(folder):
    """One manifest, the one save it names; no partial write, temporary or replaced copy."""
    manifest = json.loads((folder / "dataset.json").read_text())
    assert sorted(os.listdir(folder)) == sorted(["dataset.json", manifest["root"]])
    assert not list(folder.rglob(".tmp-*")) and not list(folder.rglob("progress.json"))


@pytest.fixture
def saved_old(tmp_path):
    folder = tmp_path / "saved"
    points.save(str(folder), "old")
    assert tags(folder) == OLD
    return folder


@pytest.mark.timeout(300)
@pytest.mark.parametrize("point", ["rounds:1", "rounds:5", "before_switch", "in_switch"])
def test_a_resave_killed_before_it_is_whole_leaves_the_old_copy(saved_old, point):
    run_killed(saved_old, "new", point)
    assert tags(saved_old) == OLD  # exactly the old copy, whole
    if point == "in_switch":
        assert list(saved_old.glob(".tmp-*"))  # the new manifest, written aside
    points.CALLS.clear()
    points.save(str(saved_old), "new")  # saving again completes the new copy
    assert tags(saved_old) == NEW
    if point.startswith("rounds:"):  # resumed after the committed rounds
        assert 0 < points.CALLS[0] < 60
    else:  # the killed save was whole: nothing is computed again
        assert points.CALLS == []
    assert_no_leftovers(saved_old)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("point", ["after_switch", "removing"])
def test_a_resave_killed_after_the_switch_leaves_the_new_copy(saved_old, point):
    run_killed(saved_old, "new", point)
    assert tags(saved_old) == NEW
    points.save(str(saved_old), "old")  # the next save cleans what the killed one left
    assert tags(saved_old) == OLD
    assert_no_leftovers(saved_old)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_kills_at_every_step_in_turn_leave_no_leftovers(saved_old):
    for point in ["rounds:2", "before_switch", "none", "removing", "rounds:3",
                  "after_switch", "in_switch"]:
        which = "new" if tags(saved_old) == OLD else "old"
        before = tags(saved_old)
        run_killed(saved_old, which, point)
        now = tags(saved_old)
        assert now == before or now == (NEW if which == "new" else OLD)
        # At most: the manifest, the copy it names, and what one killed save left (its
        # folder, and its manifest written aside).
        assert len(os.listdir(saved_old)) <= 4
    points.save(str(saved_old), "new")
    assert tags(saved_old) == NEW
    assert_no_leftovers(saved_old)


@pytest.mark.timeout(300)
def test_an_interrupted_first_save_is_reported_as_incomplete(tmp_path):
    folder = tmp_path / "first"
    run_killed(folder, "new", "rounds:2")
    with pytest.raises(FileNotFoundError, match="incomplete save") as raised:
        fl.Dataset.load(str(folder))
    assert not isinstance(raised.value, fl.DataLossError)
    points.save(str(folder), "new")
    assert tags(folder) == NEW
    assert_no_leftovers(folder)
