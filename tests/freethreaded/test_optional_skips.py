"""A test whose optional package is missing skips with the reason, never fails (the root
conftest.py); any other ImportError still fails."""

from __future__ import annotations

from pathlib import Path

pytest_plugins = ["pytester"]

_CONFTEST = Path(__file__).resolve().parents[2] / "conftest.py"


def test_missing_optional_packages_skip_and_other_import_errors_fail(pytester):
    conftest = _CONFTEST.read_text()
    # A package that is in the table and installed nowhere stands in for torch on 3.13t.
    conftest += '\nOPTIONAL_PACKAGES["feedline_absent_extra"] = "absent-extra"\n'
    pytester.makeconftest(conftest)
    pytester.makepyfile(
        test_needs_at_top="import feedline_absent_extra\n\ndef test_x():\n    pass\n",
        test_needs_inside='''
import pytest

def test_direct():
    import feedline_absent_extra

def test_through_feedline_error():
    try:
        import feedline_absent_extra.sub
    except ImportError as error:
        raise ImportError("feedline.x needs absent-extra: pip install ...") from error

@pytest.fixture
def needs_it():
    import feedline_absent_extra

def test_fixture(needs_it):
    pass

def test_other_import_error_fails():
    import feedline_not_an_optional_extra

def example():
    """
    >>> import feedline_absent_extra
    """
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rfs",
                                           "--doctest-modules")
    result.assert_outcomes(skipped=6, failed=1)  # 2: the module (tests, doctests)
    result.stdout.fnmatch_lines(["*needs absent-extra, not installed for this*"])
    result.stdout.fnmatch_lines(["FAILED *test_other_import_error_fails*"])


def test_a_child_interpreter_missing_an_optional_package_skips_and_other_failures_fail(
        pytester):
    conftest = _CONFTEST.read_text()
    conftest += '\nOPTIONAL_PACKAGES["feedline_absent_extra"] = "absent-extra"\n'
    pytester.makeconftest(conftest)
    pytester.makepyfile(test_children='''
import subprocess
import sys

import pytest

@pytest.mark.parametrize("code", ["import feedline_absent_extra",
                                  "import feedline_not_an_optional_extra",
                                  "raise SystemExit(3)"])
def test_child(code, skip_if_a_child_missed_an_optional_package):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    skip_if_a_child_missed_an_optional_package(done.stderr)
    assert done.returncode == 0, done.stderr
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rfs")
    result.assert_outcomes(skipped=1, failed=2)
    result.stdout.fnmatch_lines(["*needs absent-extra, not installed for this*"])


def test_doctests_showing_packages_without_free_threaded_wheels_skip_there_only(pytester):
    conftest = _CONFTEST.read_text()
    conftest += '\nFREE_THREADED_DOCTEST_SKIPS["shows_opencv.encode"] = "needs OpenCV here"\n'
    pytester.makepyfile(shows_opencv='''
def encode():
    """
    >>> 1 + 1
    3
    """

def other():
    """
    >>> 1 + 1
    3
    """
''')
    for free_threaded, outcomes in ((True, {"skipped": 1, "failed": 1}), (False, {"failed": 2})):
        pytester.makeconftest(conftest + f"\nFREE_THREADED = {free_threaded}\n")
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rfs",
                                               "--doctest-modules")
        result.assert_outcomes(**outcomes)
        if free_threaded:
            result.stdout.fnmatch_lines(["*needs OpenCV here*"])
