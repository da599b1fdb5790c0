"""The scaling model: what each placed part of the chess pipeline costs per example here,
and the throughput that predicts on 4, 8, 16 and 64 cores.

A 2-core wall-clock figure says little about a 16-core machine; the CPU each part spends
per example does. The tf.data-style chess pipeline
``list_files → interleave(TFRecordDataset, 2, AUTOTUNE) → shuffle(10000) → batch(512) →
map(parse) → prefetch`` splits into parts placed apart (DESIGN.md, "Placement"):

* **feeder**: the order-defining prefix up to ``batch``, one process (serial): its CPU per
  example bounds the whole pipeline at ``1 / feeder`` examples per second;
* **map**: ``parse`` of a batch, one-to-one, fanned out over worker processes;
* **transport**: a batch moved through shared memory: its records feeder → worker, its
  parsed arrays (6 kB an example) worker → consumer, each written once and read once;
* **consumer**: the training process's ``next()``: one pop per batch.

The model: on ``n`` cores, ``rate(n) = min(1 / feeder, 1 / consumer, n / total)``, where
``total`` is the sum of all parts (every core busy at best). ``./dev bench scaling`` (or
``python -m benchmarks.scaling``) measures the parts on this machine and prints the
prediction; ``benchmarks/gpu_feed.py`` and the sweep check it where a many-core machine is
lent.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from benchmarks import data as data_mod
from benchmarks.common import emit

CORES = (2, 4, 8, 16, 64)
BATCH = 512
SHUFFLE = 10_000
MEASURED_EXAMPLES = 200_000


def _prefix(files: list[str]) -> Any:
    import feedline as fl

    return (fl.Dataset.list_files(files, shuffle=False)
            .interleave(fl.TFRecordDataset, cycle_length=2, num_parallel_calls=fl.AUTOTUNE)
            .shuffle(SHUFFLE, seed=1).batch(BATCH, drop_remainder=True).repeat())


def feeder_seconds_per_example(files: list[str], examples: int) -> float:
    """CPU of the whole process (its reader threads too) per example of the prefix."""
    it = iter(_prefix(files))
    try:
        for _ in range(3):
            next(it)
        started, count = time.process_time(), 0
        while count < examples:
            count += len(next(it))
        return (time.process_time() - started) / count
    finally:
        it.close()


def map_seconds_per_example(files: list[str], repeats: int = 20) -> float:
    """CPU of ``parse`` (feedline.demo.chess.transform) per example, on one batch."""
    from feedline.demo.chess import transform

    it = iter(_prefix(files))
    try:
        batch = next(it)
    finally:
        it.close()
    transform(batch)
    started = time.thread_time()
    for _ in range(repeats):
        transform(batch)
    return (time.thread_time() - started) / (repeats * len(batch))


def transport_seconds_per_example(files: list[str], repeats: int = 20) -> float:
    """The shared-memory hops of a batch, per example: its records into a map worker, its
    parsed arrays out to the consumer, each byte written once and read once (what the
    transport's copies cost at best)."""
    from feedline.demo.chess import transform

    it = iter(_prefix(files))
    try:
        batch = next(it)
    finally:
        it.close()
    records = np.frombuffer(b"".join(batch), np.uint8)
    parsed = transform(batch)
    arrays = [records, *(np.ascontiguousarray(a) for a in parsed.values())]
    targets = [np.empty_like(a) for a in arrays]
    started = time.thread_time()
    for _ in range(repeats):
        for source, target in zip(arrays, targets):
            np.copyto(target, source)  # written into the segment
            target.sum(dtype=np.float64)  # read by the other side
    return (time.thread_time() - started) / (repeats * len(batch))


def consumer_seconds_per_example(files: list[str], batches: int = 200) -> float:
    """CPU of the consumer's thread per example when it only pops ready batches."""
    import feedline as fl
    from feedline.demo.chess import transform

    ds = _prefix(files).map(transform, num_parallel_calls=fl.AUTOTUNE).prefetch(8)
    it = iter(ds)
    try:
        for _ in range(3):
            next(it)
        started = time.thread_time()
        for _ in range(batches):
            next(it)
        return (time.thread_time() - started) / (batches * BATCH)
    finally:
        it.close()


def predict(parts: dict[str, float], cores: int) -> float:
    """Examples per second on ``cores`` cores: the serial parts bound it, and every core's
    time is shared by all parts.

    Example:
        >>> predict({"feeder": 1e-6, "map": 2.9e-6, "transport": 0.0, "consumer": 1e-7}, 2)
        500000.0
        >>> predict({"feeder": 1e-6, "map": 2.9e-6, "transport": 0.0, "consumer": 1e-7}, 64)
        1000000.0
    """
    total = sum(parts.values())
    return min(1 / parts["feeder"], 1 / parts["consumer"], cores / total)


def measure(files: list[str], examples: int) -> dict[str, Any]:
    parts = {"feeder": feeder_seconds_per_example(files, examples),
             "map": map_seconds_per_example(files),
             "transport": transport_seconds_per_example(files),
             "consumer": consumer_seconds_per_example(files)}
    return {"parts_us_per_example": {k: v * 1e6 for k, v in parts.items()},
            "predicted_examples_per_s": {str(n): predict(parts, n) for n in CORES}}


def markdown(results: dict[str, Any]) -> str:
    parts = results["parts_us_per_example"]
    lines = ["### Scaling model (chess, tf.data-style pipeline)", "",
             "| part | CPU µs per example | bound alone (examples/s) |", "|---|---|---|"]
    for name, us in parts.items():
        serial = name in ("feeder", "consumer")
        bound = f"{1e6 / us:,.0f}" if serial else "scales with cores"
        lines.append(f"| {name} | {us:.3f} | {bound} |")
    lines += ["", "| cores | " + " | ".join(results["predicted_examples_per_s"]) + " |",
              "|---|" + "---|" * len(results["predicted_examples_per_s"]),
              "| predicted examples/s | " + " | ".join(
                  f"{v:,.0f}" for v in results["predicted_examples_per_s"].values()) + " |"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chess-data", help="folder of generated chess data "
                                             "(default: generate into benchmarks/.cache)")
    parser.add_argument("--small", action="store_true", help="the --small data size")
    parser.add_argument("--examples", type=int, default=MEASURED_EXAMPLES,
                        help="examples the feeder's cost is measured over")
    parser.add_argument("--json", help="write the results here as JSON")
    args = parser.parse_args(argv)
    meta = data_mod.chess_meta(args.chess_data, args.small)
    results = measure(meta["files"], args.examples)
    results["ok"] = True
    return emit(results, markdown(results), args.json)


if __name__ == "__main__":
    sys.exit(main())
