"""A cache pass made before another completed the cache reads it rather than fill it again."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import feedline as fl


@pytest.mark.parametrize("file", [True, False])
def test_a_pass_made_before_the_cache_completed_reads_it(tmp_path, file):
    calls = []
    lock = threading.Lock()

    def counted(x: Any) -> Any:
        with lock:
            calls.append(int(x))
        return x

    ds = fl.Dataset.range(50).map(counted)
    ds = ds.cache(str(tmp_path / "cache")) if file else ds.cache()
    expected = list(range(50))
    with iter(ds) as first, iter(ds) as second:  # both made before any cache exists
        assert [int(x) for x in first] == expected
        with iter(ds) as reader:
            head = int(next(reader))  # reading the complete cache
            # Filling again would replace the cache under this reader (a file cache) and
            # compute every element a second time.
            assert [int(x) for x in second] == expected
            assert [head, *(int(x) for x in reader)] == expected
    assert sorted(calls) == expected
