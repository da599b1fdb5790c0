"""Fuzz targets: TFRecord files (plain and compressed)."""

from __future__ import annotations

from pathlib import Path

import feedline as fl
from fuzz_harness import FuzzTarget


def _tfrecord_corpus(folder: Path) -> list[bytes]:
    path = folder / "seed.tfrecord"
    with fl.TFRecordWriter(str(path)) as writer:
        for i in range(20):
            writer.write(bytes([i]) * (i * 7 + 1))
    return [path.read_bytes()]


def _read_tfrecord(data: bytes, scratch: Path) -> None:
    path = scratch / "input.tfrecord"
    path.write_bytes(data)
    for _ in fl.TFRecordDataset(str(path)):
        pass


def _names_file(error: BaseException, scratch: Path | None) -> str | None:
    if getattr(error, "path", None) or "input." in str(error):
        return None
    return "the error does not name the file"


TARGETS = {
    "tfrecord": FuzzTarget(corpus=_tfrecord_corpus, read=_read_tfrecord,
                           allowed=(fl.FeedlineError,), where=_names_file, memory_cap_mib=512),
}
