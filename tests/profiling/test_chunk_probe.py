"""With statistics on, stages that read in chunks keep doing so, and count every element."""

from __future__ import annotations

import time

import numpy as np
import pytest

import feedline as fl
from feedline.profiling import collect

STATISTICS = fl.Options(profiling=fl.ProfilingOptions(statistics=True))


def _records(tmp_path, count: int = 600) -> list[str]:
    paths = []
    for index in range(3):
        path = str(tmp_path / f"{index}.tfrecord")
        with fl.TFRecordWriter(path) as writer:
            for record in range(count // 3):
                writer.write(f"{index}-{record}".encode())
        paths.append(path)
    return paths


def _pipeline(paths: list[str]) -> fl.Dataset:
    return fl.TFRecordDataset(paths).shuffle(100, seed=7).batch(32)


def test_statistics_on_gives_the_same_batches_and_counts_every_element(tmp_path, monkeypatch):
    paths = _records(tmp_path)
    plain = [batch.tolist() for batch in _pipeline(paths)]
    chunks: list[int] = []
    original = collect.ChunkProbe.next_chunk

    def counted(self, limit):
        values = original(self, limit)
        chunks.append(len(values))
        return values

    monkeypatch.setattr(collect.ChunkProbe, "next_chunk", counted)
    with iter(_pipeline(paths).with_options(STATISTICS)) as it:
        measured = [batch.tolist() for batch in it]
        stages = {stage.operation: stage for stage in it.statistics().stages}
    assert measured == plain
    assert sum(chunks) >= 600 and max(chunks) > 1  # read in chunks, not one by one
    assert stages["tfrecord"].elements == 600
    assert stages["shuffle"].elements == 600
    assert stages["batch"].elements == len(plain) == 19


def test_a_chunk_counts_as_its_elements_each_timed_at_the_chunks_mean():
    class Chunked:
        def __init__(self):
            self.left = list(range(10))

        def __next__(self):
            if not self.left:
                raise StopIteration
            return self.left.pop(0)

        def next_chunk(self, limit):
            if not self.left:
                raise StopIteration
            time.sleep(0.001)
            taken, self.left = self.left[:limit], self.left[limit:]
            return taken

    probe = collect.ChunkProbe(Chunked(), sizer=lambda value: 8)
    assert probe.next_chunk(4) == [0, 1, 2, 3]
    assert next(probe) == 4
    assert probe.next_chunk(10) == [5, 6, 7, 8, 9]
    with pytest.raises(StopIteration):
        probe.next_chunk(3)
    counts = probe._probe_counts()
    # 4 + 1 + 5 elements and the stop; the first element kept apart as __next__ keeps it.
    assert (counts["calls"], counts["stops"], counts["errors"]) == (11, 1, 0)
    assert counts["first_ns"] >= 1_000_000 // 4
    assert counts["sized"] >= 2 and counts["sized_bytes"] == 8 * counts["sized"]
    assert counts["sampled"] >= 3 + 5  # every element of a chunk is timed


def test_a_failing_chunk_counts_one_error_call():
    class Failing:
        def __next__(self):
            return 1

        def next_chunk(self, limit):
            raise ValueError("bad record")

    probe = collect.ChunkProbe(Failing())
    with pytest.raises(ValueError, match="bad record"):
        probe.next_chunk(5)
    counts = probe._probe_counts()
    assert (counts["calls"], counts["errors"], counts["stops"]) == (1, 1, 0)


def test_only_stages_that_read_in_chunks_get_the_chunk_probe():
    from feedline.core.iterator import IteratorContext

    shuffled = fl.Dataset.range(4).shuffle(4, seed=1)._make_iterator(IteratorContext())
    mapped = fl.Dataset.range(4).map(abs)._make_iterator(IteratorContext())
    assert type(collect.make_probe(shuffled)) is collect.ChunkProbe
    assert type(collect.make_probe(mapped)) is not collect.ChunkProbe
    assert collect.is_probe(collect.make_probe(shuffled))
    assert np.array_equal(sorted(collect.make_probe(shuffled)), [0, 1, 2, 3])


def test_per_element_and_chunk_calls_add_up_in_one_count():
    # Per-element calls go through the compiled probe (when built), chunks through the
    # Python part: _probe_counts adds both.
    from feedline.core.iterator import IteratorContext

    stage = fl.Dataset.range(10).shuffle(10, seed=3)._make_iterator(IteratorContext())
    probe = collect.ChunkProbe(stage)
    got = [int(next(probe)), int(next(probe))]
    got += [int(x) for x in probe.next_chunk(5)]
    got += [int(x) for x in probe]
    assert sorted(got) == list(range(10))
    counts = probe._probe_counts()
    assert (counts["calls"], counts["stops"]) == (11, 1)  # 2 + 5 + 3 elements, one stop
    assert counts["sampled"] >= 5  # every element of the chunk is timed
    assert set(counts) >= set(collect._COUNTS) | {"threads"}
