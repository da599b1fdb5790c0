"""Fuzzing fl.datasets.load on TFDS folders: no crash, no hang, no raw error, every error
naming the file (or dataset folder) it is about, memory bounded."""

from __future__ import annotations

import pytest
from fuzz_harness import assert_clean, fuzz_count

# The corpus folders hold ArrayRecord shards, read in the child (where a missing package
# would be a crash, not a skip). array-record has no free-threaded wheel.
pytest.importorskip("array_record", reason="the TFDS corpus has ArrayRecord shards: needs "
                    "array-record, not installed for this interpreter (an optional test extra)")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("target", ["tfds_folder", "tfds_metadata", "tfds_records"])
@pytest.mark.slow
def test_load_survives_damaged_folders(target, tmp_path):
    # Each input writes and loads a whole folder (~30 ms): fewer than the default count.
    report = assert_clean("targets_tfds", target, tmp_path, seed=1, count=fuzz_count(60))
    assert report.errors > 0  # the mutations did damage what they read
    if target != "tfds_records":  # (there every input loses, repeats or damages records)
        assert report.ok > 0  # the corpus, at least, reads
