"""``feedline`` command line: ``feedline demo`` runs a real pipeline on generated sample data."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path


def _demo(args: argparse.Namespace) -> int:
    import feedline as fl
    from feedline.demo import chess

    directory = Path(args.data_dir or tempfile.mkdtemp(prefix="feedline-demo-"))
    started = time.perf_counter()
    files = chess.write_records(directory, args.records, args.files)
    print(f"wrote {args.records} chess-position records (tf.train.Example) into "
          f"{len(files)} TFRecord files in {directory} ({time.perf_counter() - started:.1f} s)")

    def pipeline() -> fl.Dataset:
        return (fl.Dataset.list_files(str(directory / "*.tfrecord"), shuffle=True, seed=0)
                # Local files on few cores: reading inline beats reader threads that would
                # compete for the GIL; the parse + unpack map gets the threads instead.
                .interleave(fl.TFRecordDataset, cycle_length=4, block_length=16)
                .shuffle(10_000, seed=0)
                .batch(args.batch_size)
                .map(chess.transform, num_parallel_calls=fl.AUTOTUNE)
                .prefetch(fl.AUTOTUNE))

    print("pipeline: list_files -> interleave(TFRecordDataset, 4 files in turn) -> "
          f"shuffle(10000) -> batch({args.batch_size}) -> map(parse_example + unpack bits) "
          "-> prefetch")
    started = time.perf_counter()
    records = batches = 0
    first_batch = None
    with iter(pipeline()) as iterator:
        for batch in iterator:
            if first_batch is None:
                first_batch = time.perf_counter() - started
                shapes = {k: v.shape for k, v in batch.items()}
                print(f"first batch after {first_batch * 1000:.0f} ms: {shapes}")
            records += len(batch["score"])
            batches += 1
            if batches == 3:
                checkpoint = json.dumps(iterator.state_dict())
                expected_next = next(iterator)
                records += len(expected_next["score"])
                batches += 1
    elapsed = time.perf_counter() - started
    print(f"one epoch: {records} records in {batches} batches, {elapsed:.2f} s, "
          f"{records / elapsed:,.0f} records/s")

    with iter(pipeline()) as restored:
        restored.load_state_dict(json.loads(checkpoint))
        resumed = next(restored)
    same = all((resumed[k] == expected_next[k]).all() for k in resumed)
    print(f"checkpoint after batch 3: {len(checkpoint)} bytes of JSON; a new iterator restored "
          f"from it produced {'the same' if same else 'a DIFFERENT'} next batch")
    return 0 if same and records == args.records else 1


def _snapshots(args: argparse.Namespace) -> int:
    from feedline.snapshot.info import remove_partial, snapshot_info

    if args.remove_partial:
        for folder in remove_partial(args.path):
            print(f"removed {folder}")
    entries = snapshot_info(args.path)
    if not entries:
        print(f"no snapshot under {args.path}")
        return 0
    print(f"{'fingerprint':<18} {'status':<9} {'elements':>12} {'MB':>10} {'chunks':>7}  "
          "compression")
    for info in entries:
        print(f"{info.fingerprint:<18} {info.status:<9} {info.elements:>12,} "
              f"{info.bytes / 1e6:>10.1f} {info.chunks:>7}  {info.compression}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``feedline`` command.

    Example:
        >>> main(["demo", "--records", "2000", "--files", "2"])  # doctest: +SKIP
        0
    """
    parser = argparse.ArgumentParser(prog="feedline", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run a real pipeline on generated sample data")
    demo.add_argument("--records", type=int, default=100_000, help="records to generate")
    demo.add_argument("--files", type=int, default=8, help="TFRecord files to spread them over")
    demo.add_argument("--batch-size", type=int, default=512)
    demo.add_argument("--data-dir", help="where to write the sample data (default: a temp dir)")
    demo.set_defaults(run=_demo)
    snapshots = commands.add_parser(
        "snapshots", help="list the snapshots under a snapshot(path) folder")
    snapshots.add_argument("path", help="the folder given to Dataset.snapshot")
    snapshots.add_argument("--remove-partial", action="store_true",
                           help="delete the partial writes no live process is writing")
    snapshots.set_defaults(run=_snapshots)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
