"""Tests (tests/) and doctests (feedline/) skip, with the reason, where an optional package
they need is not installed; they never fail for it.

Some test extras have no build for every interpreter: free-threaded CPython (3.13t) has no
wheels of torch 2.13.0 CPU, Ray, OpenCV, TensorFlow, zstandard or simplejpeg. A module that
imports one at its top (its tests, or its doctests under ``--doctest-modules``), a fixture,
a test or a doctest example that raises the ``ModuleNotFoundError`` of one (directly, or as
the cause of feedline's own "needs X" ``ImportError``) is skipped. Any other import error
still fails.
"""

from __future__ import annotations

import doctest
import importlib.util
import re
import sysconfig
from collections.abc import Callable, Iterator

import pytest
from _pytest.doctest import DoctestModule, MultipleDoctestFailures

OPTIONAL_PACKAGES = {
    "array_record": "array-record", "cv2": "opencv-python-headless", "jax": "jax",
    "jaxlib": "jax", "lz4": "lz4", "pandas": "pandas", "PIL": "pillow", "pyarrow": "pyarrow",
    "ray": "ray",
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
    """A hook's body: an ImportError of a missing optional package becomes a skip (raised
    by a test or fixture, or by a doctest example: then every failure must be one)."""
    try:
        return (yield)
    except ImportError as error:
        missing = _missing_optional(error)
        if missing is None:
            raise
        pytest.skip(_skip_reason(missing))
    except (doctest.UnexpectedException, MultipleDoctestFailures) as error:
        failures = error.failures if isinstance(error, MultipleDoctestFailures) else [error]
        missing = {_missing_optional(failure.exc_info[1])
                   if isinstance(failure, doctest.UnexpectedException) else None
                   for failure in failures}
        if None in missing:
            raise
        pytest.skip(_skip_reason(", ".join(sorted(missing))))


@pytest.fixture
def skip_if_a_child_missed_an_optional_package() -> Callable[[str], None]:
    """For a test that runs code in its own interpreter (a README example): given that
    child's stderr, skips (with the reason) where it failed importing an optional package
    that this interpreter lacks too; returns otherwise, and the test judges the failure."""
    def check(stderr: str) -> None:
        for name in re.findall(r"ModuleNotFoundError: No module named '([\w.]+)'", stderr):
            top = name.split(".")[0]
            if top in OPTIONAL_PACKAGES and importlib.util.find_spec(top) is None:
                pytest.skip(_skip_reason(OPTIONAL_PACKAGES[top]))
    return check


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


_WITHOUT_OPENCV_OR_SIMPLEJPEG = (
    "on free-threaded CPython, which has no OpenCV or simplejpeg wheels, images go through "
    "Pillow: {what}")
FREE_THREADED_DOCTEST_SKIPS = {
    "feedline.image.codecs.decode_jpeg": _WITHOUT_OPENCV_OR_SIMPLEJPEG.format(
        what="its JPEG decoder scales by 1/2, 1/4 and 1/8 only (the example's 3/8 is "
             "libjpeg-turbo's, through simplejpeg)"),
    "feedline.image.codecs.encode_png": _WITHOUT_OPENCV_OR_SIMPLEJPEG.format(
        what="it writes 16-bit gray PNGs, not 16-bit color (the example's, through OpenCV)"),
    "feedline.image.jpeg_quality.adjust_jpeg_quality": _WITHOUT_OPENCV_OR_SIMPLEJPEG.format(
        what="its JPEG decoder's pixels differ from TensorFlow's by a level or so (the "
             "example's are simplejpeg's, TensorFlow's own)"),
}
"""Doctests whose examples show what packages with no free-threaded wheel give: skipped there,
with the reason (they run wherever those packages are installed)."""


def pytest_collection_modifyitems(config, items):
    if not FREE_THREADED:
        return
    for item in items:
        reason = FREE_THREADED_DOCTEST_SKIPS.get(item.name) \
            if isinstance(item, pytest.Item) and type(item).__name__ == "DoctestItem" else None
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
