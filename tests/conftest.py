"""Shared fixtures: every test must leave no feedline thread running."""

from __future__ import annotations

import gc
import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.doctest import DoctestModule

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
    core busy of two: the pipeline moves to worker processes (where it can)."""
    from feedline.placement import auto
    from feedline.placement.auto import AutoProcessesIterator

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


# ------------------------------------------------------------------ optional packages
OPTIONAL_PACKAGES = {
    "array_record": "array-record", "cv2": "opencv-python-headless", "jax": "jax",
    "jaxlib": "jax", "lz4": "lz4", "PIL": "pillow", "pyarrow": "pyarrow", "ray": "ray",
    "simplejpeg": "simplejpeg", "tensorflow": "tensorflow",
    "tensorflow_datasets": "tensorflow-datasets", "torch": "torch",
    "torchvision": "torchvision", "zstandard": "zstandard",
}
"""Test extras a test may need (module: distribution). Some have no build for every
interpreter (free-threaded CPython has no torch 2.13.0 CPU, Ray, OpenCV, TensorFlow,
zstandard or simplejpeg wheels): a test that needs one skips where it is not installed."""

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def _missing_optional(error: BaseException) -> str | None:
    """The optional distribution whose absence raised ``error`` (directly, or as the cause
    of feedline's own "needs X" ImportError), or ``None``: any other error is a failure."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModuleNotFoundError) and current.name:
            top = current.name.split(".")[0]
            if top in OPTIONAL_PACKAGES and importlib.util.find_spec(top) is None:
                return OPTIONAL_PACKAGES[top]
        current = current.__cause__ or current.__context__
    return None


def _skip_reason(distribution: str) -> str:
    where = "this free-threaded interpreter" if FREE_THREADED else "this interpreter"
    return f"needs {distribution}, not installed for {where} (an optional test extra)"


def _skipping_missing_optional() -> Iterator[None]:
    """A hook's body: an ImportError of a missing optional package becomes a skip."""
    try:
        return (yield)
    except ImportError as error:
        missing = _missing_optional(error)
        if missing is None:
            raise
        pytest.skip(_skip_reason(missing))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _skipping_missing_optional())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _skipping_missing_optional())


class _SkipsWithoutItsImports:
    """A module (its tests, or its doctests under --doctest-modules) that imports an
    optional package at its top: skipped, with the reason, where that package is missing."""

    def _getobj(self):
        try:
            return super()._getobj()
        except pytest.Collector.CollectError as error:
            missing = _missing_optional(error)
            if missing is None:
                raise
            pytest.skip(_skip_reason(missing), allow_module_level=True)


class _TestModule(_SkipsWithoutItsImports, pytest.Module):
    pass


class _DoctestModule(_SkipsWithoutItsImports, DoctestModule):
    pass


def pytest_pycollect_makemodule(module_path, parent):
    if module_path.name == "conftest.py":
        return None
    return _TestModule.from_parent(parent, path=module_path)


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path, parent):
    collected = yield
    return [_DoctestModule.from_parent(parent, path=file_path)
            if type(node) is DoctestModule else node for node in collected]


# Conftest files are plugins, not test modules: --doctest-modules would also import each as a
# module named "conftest", and one in a folder that sorts before this file (tests/autotune/)
# then clashes with this one ("import file mismatch"). They hold no doctests.
collect_ignore_glob = ["conftest.py", "*/conftest.py"]
