"""The serial path and the placement of the chess pipeline (issue 24), stage by stage.

Two measurements on the chess data (8 TFRecord files of ``tf.train.Example``; the
``benchmarks.data`` cache):

* ``stages``: CPU of the whole process per record as the order-defining stages are added one
  by one (``TFRecordDataset``, ``interleave(…, 2, AUTOTUNE)``, ``shuffle(10000)``,
  ``batch(512)``), each read the way the next stage reads it (``next_chunk(512)``; the batch
  through ``next()``): what each stage adds to the serial path.
* ``trainer``: the whole tf.data-style pipeline (``… → repeat → map(parse, AUTOTUNE) →
  prefetch(AUTOTUNE)``) feeding a simulated training step per batch (a busy loop holding the
  GIL, then a sleep), under a placement: ``default`` options, ``threads`` only
  (``AutotuneOptions(processes=False, choose_executor=False)``) or a ``feeder`` process
  (``AutotuneOptions(processes=True)``): examples/s, the share of time the trainer waited,
  and the CPU the consumer's process spent per batch beyond the trainer's own, over the
  whole run and over its second half (after AUTOTUNE settled: on 2 cores it may try a feeder
  beside the trainer, a few seconds in), with the placement AUTOTUNE chose.

Run it with ``python -m benchmarks.serial_path`` (``--gil-ms 1 --sleep-ms 2`` for the fast
trainer; about two minutes per placement on 2 cores).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import feedline as fl
from benchmarks import data as data_mod
from benchmarks.common import emit

SHUFFLE, BATCH, CHUNK = 10_000, 512, 512
PLACEMENTS = ("default", "threads", "feeder")


def _files(small: bool) -> list[str]:
    return data_mod.chess_meta(None, small)["files"]


def _interleaved(files: list[str]) -> fl.Dataset:
    return (fl.Dataset.list_files(files, shuffle=False)
            .interleave(fl.TFRecordDataset, cycle_length=2, num_parallel_calls=fl.AUTOTUNE))


def _stage_datasets(files: list[str]) -> list[tuple[str, fl.Dataset, bool]]:
    """``(stage added, dataset, read in chunks)`` in the order the stages are added."""
    return [
        ("TFRecordDataset(files)", fl.TFRecordDataset(files), True),
        ("interleave(…, 2, AUTOTUNE)", _interleaved(files), True),
        ("shuffle(10000)", _interleaved(files).shuffle(SHUFFLE, seed=1), True),
        ("batch(512)", _interleaved(files).shuffle(SHUFFLE, seed=1)
         .batch(BATCH, drop_remainder=True), False),
    ]


def cpu_per_record(dataset: fl.Dataset, chunked: bool, records: int) -> float:
    """Process CPU seconds per record over ``records`` records after a short warm-up."""
    it = iter(dataset)
    root = it._root  # the last stage: read the way the next stage would read it
    pull = (lambda: len(root.next_chunk(CHUNK))) if chunked else (lambda: len(next(it)))
    try:
        for _ in range(3):
            pull()
        started, count = time.process_time(), 0
        while count < records:
            count += pull()
        return (time.process_time() - started) / count
    finally:
        it.close()


def measure_stages(files: list[str], records: int) -> list[dict[str, Any]]:
    rows, previous = [], 0.0
    for name, dataset, chunked in _stage_datasets(files):
        seconds = cpu_per_record(dataset, chunked, records)
        rows.append({"stage": name, "us_per_record": seconds * 1e6,
                     "added_us": (seconds - previous) * 1e6})
        previous = seconds
    return rows


def _options(placement: str) -> fl.Options:
    if placement == "threads":
        return fl.Options(autotune=fl.AutotuneOptions(processes=False, choose_executor=False))
    if placement == "feeder":
        return fl.Options(autotune=fl.AutotuneOptions(processes=True))
    return fl.Options()


def feed_trainer(files: list[str], placement: str, gil_ms: float, sleep_ms: float,
                 batches: int) -> dict[str, Any]:
    """The whole pipeline feeding ``batches`` simulated training steps."""
    from feedline.demo.chess import transform

    dataset = (_interleaved(files).shuffle(SHUFFLE, seed=1).batch(BATCH, drop_remainder=True)
               .repeat().map(transform, num_parallel_calls=fl.AUTOTUNE)
               .prefetch(fl.AUTOTUNE).with_options(_options(placement)))
    it = iter(dataset)
    halves = []  # (wall, waited, cpu) of each half of the run
    try:
        for _ in range(20):
            next(it)
        for half in (batches // 2, batches - batches // 2):
            waited = 0.0
            started, cpu = time.perf_counter(), time.process_time()
            for _ in range(half):
                before = time.perf_counter()
                next(it)
                waited += time.perf_counter() - before
                end = time.perf_counter() + gil_ms / 1e3
                while time.perf_counter() < end:  # the step's Python work, holding the GIL
                    pass
                time.sleep(sleep_ms / 1e3)
            halves.append((half, time.perf_counter() - started, waited,
                           time.process_time() - cpu))
        decision = it.process_decision
    finally:
        it.close()

    def figures(parts: list[tuple[int, float, float, float]]) -> dict[str, float]:
        n, wall, waited, cpu = (sum(p[i] for p in parts) for i in range(4))
        return {"examples_per_s": n * BATCH / wall, "waited_share": waited / wall,
                "consumer_ms_per_batch": (cpu - n * gil_ms / 1e3) / n * 1e3}

    # The second half: after AUTOTUNE settled (a feeder tried beside the loop included).
    return {"placement": placement, **figures(halves),
            "second_half": figures(halves[1:]),
            "chosen": "-" if decision is None else decision.mode}


def markdown(results: dict[str, Any]) -> str:
    """The two tables.

    Example:
        >>> print(markdown({"stages": [{"stage": "s", "us_per_record": 1.0, "added_us": 1.0}],
        ...                 "trainer": {"gil_ms": 1, "sleep_ms": 2, "rows": [
        ...                     {"placement": "default", "examples_per_s": 1e5,
        ...                      "waited_share": 0.05, "consumer_ms_per_batch": 2.0}]}}))
        | stage added | CPU µs per record | added |
        |---|---|---|
        | s | 1.000 | +1.000 |
        <BLANKLINE>
        | placement (trainer 1 ms GIL + 2 ms sleep) | chosen | examples/s | trainer waited | consumer CPU per batch | second half: examples/s | waited | consumer CPU |
        |---|---|---|---|---|---|---|---|
        | default | - | 100,000 | 5.0% | 2.00 ms | 100,000 | 5.0% | 2.00 ms |
    """
    lines = ["| stage added | CPU µs per record | added |", "|---|---|---|"]
    lines += [f"| {r['stage']} | {r['us_per_record']:.3f} | {r['added_us']:+.3f} |"
              for r in results["stages"]]
    trainer = results["trainer"]
    header = (f"| placement (trainer {trainer['gil_ms']:g} ms GIL + {trainer['sleep_ms']:g} "
              "ms sleep) | chosen | examples/s | trainer waited | consumer CPU per batch | "
              "second half: examples/s | waited | consumer CPU |")
    lines += ["", header, "|---|---|---|---|---|---|---|---|"]
    for r in trainer["rows"]:
        late = r.get("second_half", r)
        lines.append(
            f"| {r['placement']} | {r.get('chosen', '-')} | {r['examples_per_s']:,.0f} | "
            f"{r['waited_share']:.1%} | {r['consumer_ms_per_batch']:.2f} ms | "
            f"{late['examples_per_s']:,.0f} | {late['waited_share']:.1%} | "
            f"{late['consumer_ms_per_batch']:.2f} ms |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="the small chess data")
    parser.add_argument("--records", type=int, default=300_000,
                        help="records per stage measurement")
    parser.add_argument("--batches", type=int, default=4000,
                        help="training steps per placement (figures also for the second half: "
                             "AUTOTUNE may try a feeder after 10 s)")
    parser.add_argument("--gil-ms", type=float, default=1.5)
    parser.add_argument("--sleep-ms", type=float, default=6.5)
    parser.add_argument("--placements", nargs="+", choices=PLACEMENTS, default=list(PLACEMENTS))
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    files = _files(args.small)
    records = min(args.records, 35_000) if args.small else args.records
    results = {"stages": measure_stages(files, records),
               "trainer": {"gil_ms": args.gil_ms, "sleep_ms": args.sleep_ms, "rows": [
                   feed_trainer(files, p, args.gil_ms, args.sleep_ms, args.batches)
                   for p in args.placements]}}
    return emit(results, markdown(results), args.json)


if __name__ == "__main__":
    sys.exit(main())
