"""Shared fixtures: every test must leave no feedline thread running."""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from feedline.testing import feedline_threads

# Test data lives in the repository, so a fresh clone tests with nothing beside it.
TESTDATA = Path(__file__).resolve().parent / "data"


def pytest_configure(config):
    """Derived files (TFRecord indexes) go to a temporary cache folder, never the home one."""
    global _cache_dir
    _cache_dir = tempfile.mkdtemp(prefix="feedline-test-cache-")
    os.environ["FEEDLINE_CACHE_DIR"] = _cache_dir


def pytest_unconfigure(config):
    if _cache_dir is not None:
        shutil.rmtree(_cache_dir, ignore_errors=True)


_cache_dir: str | None = None


def pytest_collection_finish(session):
    """Freeze what collection left alive: the imported modules (torch, jax, pyarrow, ...).

    Every test ends with a full ``gc.collect()`` (below). With everything collection imports
    alive, that is ~250-350k tracked objects and ~0.1-0.2 s per test, more than the tests
    themselves take. Objects alive before the first test cannot be garbage a test forgot, so
    the collector may skip them (``gc.freeze``); what the tests create is still collected.
    """
    _freeze()


def pytest_runtest_logfinish(nodeid, location):
    """A test that imported modules (torch, ray, ... imported where used) leaves them alive
    for the rest of the run: freeze them too, once the test and its fixtures are gone."""
    if len(sys.modules) != _frozen_with_modules:
        _freeze()


_frozen_with_modules = 0


def _freeze() -> None:
    global _frozen_with_modules
    gc.collect()
    gc.freeze()
    _frozen_with_modules = len(sys.modules)


@pytest.fixture(autouse=True)
def _no_thread_survives_a_test():
    """Iterators a test forgot are garbage-collected and must close; then no thread may remain."""
    before = set(feedline_threads())
    yield
    gc.collect()
    leaked = [t for t in feedline_threads() if t not in before]
    for thread in leaked:
        thread.join(10)
    alive = [t.name for t in leaked if t.is_alive()]
    assert not alive, f"threads left running by this test: {alive}"


TRIAL_HELD = 6
"""Elements AUTOTUNE's trial holds under :func:`gil_bound_trial` (``TRIAL_MAX_ELEMENTS``)."""


@pytest.fixture
def gil_bound_trial(monkeypatch):
    """AUTOTUNE's trial of a whole pipeline holds :data:`TRIAL_HELD` elements and reports one
    core busy of two: the pipeline moves to worker processes (where it can). The test
    pipelines' elements are cheap; the trial stands for a GIL-bound one, so an element also
    costs more here than receiving it from a worker would
    (:data:`feedline.placement.policy.SHARDS_MIN_RECEIVE_GAIN`)."""
    from feedline.placement import auto, policy
    from feedline.placement.auto import AutoProcessesIterator

    monkeypatch.setattr(policy, "SHARDS_MIN_RECEIVE_GAIN", 0.0)

    original = AutoProcessesIterator._trial

    def one_core_busy(self):
        original(self)
        return 1.0, False
    monkeypatch.setattr(AutoProcessesIterator, "_trial", one_core_busy)
    monkeypatch.setattr(auto, "TRIAL_MAX_ELEMENTS", TRIAL_HELD)


@pytest.fixture
def spawned(monkeypatch) -> list[int]:
    """The pids of the pipeline worker processes (``multiprocess``, AUTOTUNE's moves) the test
    starts, in order: a discarded iterator forgets its pool, and so its pids."""
    from feedline.placement import worker_loop

    pids: list[int] = []
    original = worker_loop.start_worker

    def recording(*args, **kwargs):
        process = original(*args, **kwargs)
        pids.append(process.pid)
        return process
    monkeypatch.setattr(worker_loop, "start_worker", recording)
    return pids


@pytest.fixture
def golden_dir() -> Path:
    """``tests/data/tfrecord``: files written by TensorFlow (see the README there)."""
    path = TESTDATA / "tfrecord"
    if not path.is_dir():
        pytest.fail(f"golden files missing: {path} (they are part of the repository)")
    return path


sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))


# Conftest files are plugins, not test modules: --doctest-modules would also import each as a
# module named "conftest", and one in a folder that sorts before this file (tests/autotune/)
# then clashes with this one ("import file mismatch"). They hold no doctests.
collect_ignore_glob = ["conftest.py", "*/conftest.py"]


@pytest.fixture
def gil_build_rules(monkeypatch):
    """Placement's and the tuner's rules as under the GIL, on any interpreter: for tests that
    give GIL measurements and expect the GIL build's decisions (a free-threaded interpreter
    keeps work on threads and counts cores only; tests/placement/test_placement_decisions.py
    tests both)."""
    from feedline.autotune import start
    from feedline.execution import stage_knobs
    from feedline.placement import policy

    for module in (policy, start, stage_knobs):
        monkeypatch.setattr(module, "gil_disabled", lambda: False)


@pytest.fixture
def shuffle_buffers_by_value(monkeypatch):
    """Shuffle checkpoints hold their buffers by value (as before positions): for tests of
    what states do with elements (encoding, damage, hostile payloads), not of the re-read."""
    from feedline.transforms import shuffle

    monkeypatch.setattr(shuffle, "MAX_REPLAY_SECONDS", -1.0)
