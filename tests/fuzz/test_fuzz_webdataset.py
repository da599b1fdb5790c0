"""Fuzzing the WebDataset reader: no crash, no hang, no raw error, no silently different
samples, memory bounded (targets and caps: targets_webdataset.py)."""

from __future__ import annotations

import pytest
from fuzz_harness import assert_clean


@pytest.mark.timeout(600)
@pytest.mark.parametrize("target", ["webdataset", "webdataset_gzip", "webdataset_decode"])
@pytest.mark.slow
def test_reader_survives_damaged_shards(target, tmp_path):
    report = assert_clean("targets_webdataset", target, tmp_path, seed=41)
    assert report.errors > 0  # the mutations did damage what they read
