"""Global shuffle on the chess TFRecord files: the index's cost, and shuffled vs sequential reads.

``python -m benchmarks.global_shuffle [--small] [--rounds 3] [--write]``

1. **Index**: building the record-offset index of every file (indexes removed first), then
   loading the stored indexes: seconds, MB/s of TFRecord data, bytes of index.
2. **Records**: reading every record from the page cache (a warm-up pass first), in file
   order (``TFRecordDataset(files)``) and in a global shuffle (``.global_shuffle(seed)``):
   records/s, best of ``--rounds``, and the ratio (the goal: >= 0.8x sequential).
3. **Chess pipeline** (batch 512, vectorized parse, prefetch), examples/s: no shuffle, a
   10,000-element shuffle buffer (what the other benchmarks use), and a global shuffle.

``--write`` puts the table in ``benchmarks/RESULTS-global-shuffle.md``. tf.data has no
random access to TFRecord files (its ``global_shuffle`` needs random-access sources such as
``range``), so there is no peer row; ``./dev bench`` compares the pipelines with peers.
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common, data

RESULTS = Path(__file__).resolve().parent / "RESULTS-global-shuffle.md"
SEED = 1234


def best_rate(make: Callable[[], Any], count_of: Callable[[Any], int], rounds: int) -> float:
    """Items per second of the best of ``rounds`` full passes (after one warm-up pass)."""
    import feedline as fl

    with fl.PipelineIterator(make()) as warm:
        for _ in warm:
            pass
    best = 0.0
    for _ in range(rounds):
        count = 0
        started = time.perf_counter()
        with fl.PipelineIterator(make()) as iterator:
            for item in iterator:
                count += count_of(item)
        best = max(best, count / (time.perf_counter() - started))
    return best


def chess_pipeline(files: list[str], order: str) -> Any:
    import feedline as fl

    features = {"d": fl.FixedLenFeature([], "bytes"), "s": fl.FixedLenFeature([], "int64")}

    def parse_batch(serialized: np.ndarray) -> dict[str, np.ndarray]:
        parsed = fl.parse_example(serialized, features)
        d = np.frombuffer(b"".join(parsed["d"]), dtype=np.uint8).reshape(len(serialized), -1)
        return common.chess_transform(d, parsed["s"])

    ds = fl.TFRecordDataset(files)
    if order == "buffer":
        ds = ds.shuffle(common.CHESS_SHUFFLE_BUFFER, seed=SEED)
    elif order == "global":
        ds = ds.global_shuffle(seed=SEED)
    return ds.batch(common.CHESS_BATCH).map(parse_batch, num_parallel_calls=fl.AUTOTUNE) \
        .prefetch(fl.AUTOTUNE)


def measure(records: int, files: int, rounds: int) -> dict[str, Any]:
    import feedline as fl
    from feedline.formats.tfrecord_index import INDEX_SUFFIX, load_indexes

    meta = data.chess(records, files, SEED)
    paths = meta["files"]
    for index in glob.glob(os.path.join(os.path.dirname(paths[0]), "*" + INDEX_SUFFIX)):
        os.remove(index)
    data_bytes = sum(os.path.getsize(p) for p in paths)
    for path in paths:  # into the page cache: the index build is then CPU, not disk
        with open(path, "rb") as file:
            while file.read(1 << 24):
                pass
    started = time.perf_counter()
    load_indexes(paths, progress=False)
    build = time.perf_counter() - started
    started = time.perf_counter()
    load_indexes(paths, progress=False)
    load = time.perf_counter() - started
    index_bytes = sum(os.path.getsize(p + INDEX_SUFFIX) for p in paths)

    def sequential() -> Any:
        return fl.TFRecordDataset(paths)

    def shuffled() -> Any:
        return fl.TFRecordDataset(paths).global_shuffle(seed=SEED)

    def rows(batch: dict[str, np.ndarray]) -> int:
        return len(batch["score"])

    result = {
        "records": records, "files": files, "data_mb": data_bytes / 1e6,
        "index_build_s": build, "index_load_s": load, "index_bytes": index_bytes,
        "sequential_rps": best_rate(sequential, lambda _: 1, rounds),
        "global_rps": best_rate(shuffled, lambda _: 1, rounds),
    }
    for order in ("none", "buffer", "global"):
        result[f"pipeline_{order}"] = best_rate(lambda o=order: chess_pipeline(paths, o),
                                                rows, rounds)
    return result


def table(r: dict[str, Any]) -> str:
    ratio = r["global_rps"] / r["sequential_rps"]
    lines = [
        (f"Chess data: {r['records']:,} records in {r['files']} TFRecord files, "
        f"{r['data_mb']:.1f} MB, from the page cache."),
        "",
        "| index | |",
        "|---|---|",
        (f"| build (every file scanned) | {r['index_build_s']:.3f} s "
        f"({r['data_mb'] / r['index_build_s']:,.0f} MB/s) |"),
        f"| load (stored beside the files) | {r['index_load_s'] * 1e3:.2f} ms |",
        (f"| size | {r['index_bytes']:,} bytes ({r['index_bytes'] / r['records']:.1f} "
        "per record) |"),
        "",
        "| reading every record | records/s | vs sequential |",
        "|---|---|---|",
        f"| sequential (`TFRecordDataset(files)`) | {r['sequential_rps']:,.0f} | 1.00x |",
        (f"| global shuffle (`.global_shuffle(seed)`) | {r['global_rps']:,.0f} | "
        f"**{ratio:.2f}x** (goal >= 0.8x) |"),
        "",
        "| chess pipeline (batch 512, parse, prefetch) | examples/s | vs no shuffle |",
        "|---|---|---|",
    ]
    base = r["pipeline_none"]
    for order, label in (("none", "no shuffle"), ("buffer", "shuffle(10,000) buffer"),
                         ("global", "global_shuffle(seed)")):
        lines.append(f"| {label} | {r[f'pipeline_{order}']:,.0f} | "
                     f"{r[f'pipeline_{order}'] / base:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="40,000 records instead of 400,000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    args = parser.parse_args(argv)
    sizes = data.Sizes.small() if args.small else data.Sizes()
    result = measure(sizes.chess_records, sizes.chess_files, args.rounds)
    text = table(result)
    print(text)
    if args.write:
        command = "python -m benchmarks.global_shuffle" + (" --small" if args.small else "")
        RESULTS.write_text(
            "# Global shuffle: index cost, shuffled vs sequential reading\n\n"
            f"`{command}` on {platform.machine()}, {os.cpu_count()} CPUs, "
            f"{time.strftime('%Y-%m-%d')}.\n\n{text}\n")


if __name__ == "__main__":
    main()
