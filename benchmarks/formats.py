"""Record-format throughput on the chess records (issue 3): records per second for

1. framing only (feedline's TFRecord reader with the CRC check replaced by a no-op),
2. framing + CRC (the reader as shipped),
3. per-record ``parse_single_example``,
4. batched ``parse_example`` (batches of 512),

next to a one-thread NumPy ``unpackbits`` of the same 194-byte payloads, the reference for
"memory speed". Run it with ``./dev bench formats`` or ``python -m benchmarks.formats``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from benchmarks import data as data_mod
from benchmarks.common import emit

BATCH = 512


class _EqualsEverything:
    """Stands in for a checksum: compares equal to whatever the file holds."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__


_ANY = _EqualsEverything()


@contextlib.contextmanager
def crc_disabled() -> Iterator[None]:
    """Replace the reader's checksum function by a no-op, to time the framing alone."""
    from feedline.formats import tfrecord

    original = tfrecord.masked_crc32c
    tfrecord.masked_crc32c = lambda data: _ANY
    try:
        yield
    finally:
        tfrecord.masked_crc32c = original


def _rate(fn: Callable[[], int], repeats: int) -> dict[str, Any]:
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        count = fn()
        rates.append(count / (time.perf_counter() - start))
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates)}


def measure(files: list[str], d: np.ndarray, repeats: int,
            per_record_limit: int) -> dict[str, Any]:
    import feedline as fl

    features = {"d": fl.FixedLenFeature([], "bytes"), "s": fl.FixedLenFeature([], "int64")}

    def read_all() -> int:
        count = 0
        for _ in fl.TFRecordDataset(files):
            count += 1
        return count

    records = list(fl.TFRecordDataset(files))
    if len(records) != len(d):
        raise RuntimeError(f"read {len(records)} records, expected {len(d)}")
    subset = records[:per_record_limit]
    batches = [np.array(records[i:i + BATCH], dtype=object)
               for i in range(0, len(records), BATCH)]

    def parse_each() -> int:
        for record in subset:
            fl.parse_single_example(record, features)
        return len(subset)

    def parse_batched() -> int:
        for batch in batches:
            fl.parse_example(batch, features)
        return len(records)

    chunks = [d[i:i + BATCH] for i in range(0, len(d), BATCH)]

    def unpack() -> int:
        for chunk in chunks:
            np.unpackbits(chunk, axis=1)
        return len(d)

    results = {}
    with crc_disabled():
        results["framing"] = _rate(read_all, repeats)
    results["framing_crc"] = _rate(read_all, repeats)
    results["parse_single"] = _rate(parse_each, repeats)
    results["parse_batched"] = _rate(parse_batched, repeats)
    results["numpy_unpackbits"] = _rate(unpack, repeats)
    results["records"] = len(records)
    results["per_record_sample"] = len(subset)
    return results


LABELS = [
    ("framing", "TFRecord framing only (CRC check replaced by a no-op)"),
    ("framing_crc", "TFRecord framing + CRC32C of length and data"),
    ("parse_single", "per-record `parse_single_example`"),
    ("parse_batched", f"batched `parse_example` (batch {BATCH})"),
    ("numpy_unpackbits", (f"reference: one-thread NumPy `unpackbits` of the payloads "
                          f"(chunks of {BATCH})")),
]


def markdown(results: dict[str, Any]) -> str:
    title = (f"### formats — records/s on {results['records']:,} chess records "
             "(194-byte `d` + int64 `s`)")
    lines = [title, "",
             "| step | records/s (median) | min–max |", "|---|---|---|"]
    for key, label in LABELS:
        r = results[key]
        lines.append(f"| {label} | {r['median']:,.0f} | {r['min']:,.0f}–{r['max']:,.0f} |")
    lines.append("")
    lines.append(f"(per-record parse timed on the first {results['per_record_sample']:,} records)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.formats", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chess-data", help="folder of generated chess data "
                                             "(default: generate into benchmarks/.cache)")
    parser.add_argument("--small", action="store_true", help="the --small data size")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--per-record-limit", type=int, default=100_000,
                        help="records timed with the (slow) per-record parse")
    parser.add_argument("--json", help="write the results here as JSON")
    args = parser.parse_args(argv)
    meta = data_mod.chess_meta(args.chess_data, args.small)
    d = np.load(meta["d"])
    results = measure(meta["files"], d, args.repeats, args.per_record_limit)
    return emit(results, markdown(results), args.json)


if __name__ == "__main__":
    sys.exit(main())
