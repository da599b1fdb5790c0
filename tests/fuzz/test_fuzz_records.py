"""Fuzzing the record readers: no crash, no hang, no raw error, memory bounded, and every
input the oracle reads whole read to the same records (see targets_records.py)."""

from __future__ import annotations

import importlib.util

import pytest
from fuzz_harness import assert_clean
from targets_records import TARGETS

_NEEDS = {"array_record": "array_record", "array_record_random": "array_record"}
_ANY_BYTES_READ = {"text"}  # every byte string is lines of text: nothing to call damage


@pytest.mark.timeout(900)
@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.slow
def test_reader_survives_damaged_input(target, tmp_path):
    package = _NEEDS.get(target)
    if package and importlib.util.find_spec(package) is None:
        pytest.skip(f"the optional {package} package is not installed")
    report = assert_clean("targets_records", target, tmp_path, seed=1)
    if target not in _ANY_BYTES_READ:
        assert report.errors > 0  # the mutations did damage what they read
    assert report.ok > 0  # and some inputs still read whole
