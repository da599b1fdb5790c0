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
``total`` is the sum of all parts (every core busy at best).

``--workload images`` models the images pipeline the same way (issue 27), on the ImageNet
layout (``images_tfrecord``: JPEGs in tf.train.Example records) and feedline's batched form
``TFRecordDataset → shuffle(1024) → batch(64) → map(parse_example + feedline.image
decode_and_crop_jpeg + flip + normalize, AUTOTUNE) → prefetch`` on threads:

* **feeder** (serial): reading the records, the shuffle buffer and batching the encoded
  bytes, in the feeder's thread(s);
* **map** (parallel): parse, decode, crop, flip and normalize of a batch, GIL released;
* **consumer** (serial): the training process's ``next()``;
* **stack** (serial, the per-image form only): ``map(per image) → batch`` stacks the
  float32 pixels (602 kB an image) in the batch iterator, one thread: reported beside, as
  what batching the bytes first avoids.

The issue's goal: serial CPU per image (feeder + consumer) at most 20 µs, so that 16 cores
predict at least 5,000 images/s. ``./dev bench scaling`` (or
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
IMAGE_CORES = (4, 8, 16, 64)
IMAGE_BATCH = 64
IMAGE_SHUFFLE = 1024
MEASURED_IMAGES = 20_000
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


# ----------------------------------------------------------------------------- images
def _image_prefix(files: list[str]) -> Any:
    import feedline as fl

    return (fl.TFRecordDataset(files).shuffle(IMAGE_SHUFFLE, seed=1)
            .batch(IMAGE_BATCH, drop_remainder=True).repeat())


def _image_map(params: np.ndarray) -> Any:
    import feedline as fl
    from benchmarks import common
    from benchmarks.systems import feedline_sys

    feedline_sys.fl = fl
    features = {common.IMAGE_KEY: fl.FixedLenFeature([], "bytes"),
                common.LABEL_KEY: fl.FixedLenFeature([], "int64"),
                common.INDEX_KEY: fl.FixedLenFeature([], "int64")}

    def parse_batch(records: np.ndarray) -> dict[str, np.ndarray]:
        parsed = fl.parse_example(records, features)
        rows = params[parsed[common.INDEX_KEY]]
        return {"image": feedline_sys.augment_batch(parsed[common.IMAGE_KEY], rows[:, 0],
                                                    rows[:, 1], rows[:, 2]),
                "label": parsed[common.LABEL_KEY]}

    return parse_batch


def image_feeder_seconds(files: list[str], images: int) -> float:
    """CPU of the whole process per image while it reads, shuffles and batches the records
    (the serial, order-defining prefix; nothing else runs)."""
    it = iter(_image_prefix(files))
    try:
        for _ in range(3):
            next(it)
        started, count = time.process_time(), 0
        while count < images:
            count += len(next(it))
        return (time.process_time() - started) / count
    finally:
        it.close()


def image_map_seconds(files: list[str], params: np.ndarray, repeats: int = 5) -> float:
    """CPU of one batch's parse + decode + augment per image (one thread)."""
    it = iter(_image_prefix(files))
    try:
        batch = next(it)
    finally:
        it.close()
    fn = _image_map(params)
    fn(batch)
    started = time.thread_time()
    for _ in range(repeats):
        fn(batch)
    return (time.thread_time() - started) / (repeats * len(batch))


def image_stack_seconds(repeats: int = 5) -> float:
    """CPU per image of stacking float32 224x224x3 crops into a batch (what ``batch`` after
    a per-image map does in one thread)."""
    from benchmarks import common

    crops = [np.full((common.CROP, common.CROP, 3), i, np.float32) for i in range(IMAGE_BATCH)]
    np.stack(crops)
    started = time.thread_time()
    for _ in range(repeats):
        np.stack(crops)
    return (time.thread_time() - started) / (repeats * IMAGE_BATCH)


def image_consumer_seconds(files: list[str], params: np.ndarray, map_seconds: float,
                           batches: int = 30) -> float:
    """CPU of the consumer's thread per image when it pops ready batches.

    The buffer fills first (for the time the map needs to make ``batches`` batches on this
    machine's cores, with a margin): on a machine where the map is the bottleneck (2 cores),
    popping batches as they arrive would measure the consumer's waits, which more cores
    take away.
    """
    import os

    import feedline as fl

    ds = _image_prefix(files).map(_image_map(params), num_parallel_calls=fl.AUTOTUNE)
    it = iter(ds.prefetch(batches))
    try:
        for _ in range(3):
            next(it)
        time.sleep(1.5 * batches * IMAGE_BATCH * map_seconds / (os.cpu_count() or 1) + 0.5)
        # Popped batches are kept until the clock stops: freeing a 38 MB batch (unmapping
        # its pages, ~300 µs) is the training loop's, whatever system made it.
        held = []
        started = time.thread_time()
        for _ in range(batches):
            held.append(next(it))
        return (time.thread_time() - started) / (batches * IMAGE_BATCH)
    finally:
        it.close()


def predict_images(parts: dict[str, float], cores: int) -> float:
    """Images per second on ``cores`` cores of the batched pipeline (``stack`` is not part
    of it): serial parts bound it, the cores share the total.

    Example:
        >>> parts = {"feeder": 15e-6, "map": 1.2e-3, "consumer": 2e-6, "stack": 80e-6}
        >>> round(predict_images(parts, 16))
        13147
        >>> round(predict_images(parts, 64))
        52588
        >>> round(predict_images({**parts, "feeder": 1e-3}, 16))
        998
    """
    serial = parts["feeder"] + parts["consumer"]
    total = serial + parts["map"]
    return min(1 / serial, cores / total)


def measure_images(files: list[str], params: np.ndarray, images: int) -> dict[str, Any]:
    parts = {"feeder": image_feeder_seconds(files, images),
             "map": image_map_seconds(files, params)}
    parts["consumer"] = image_consumer_seconds(files, params, parts["map"])
    parts["stack"] = image_stack_seconds()
    serial = parts["feeder"] + parts["consumer"]
    return {"workload": "images",
            "parts_us_per_image": {k: v * 1e6 for k, v in parts.items()},
            "serial_us_per_image": serial * 1e6,
            "serial_goal_met": serial <= 20e-6,
            "predicted_images_per_s": {str(n): predict_images(parts, n) for n in IMAGE_CORES},
            "predicted_per_image_form": {
                str(n): predict_images({**parts, "feeder": parts["feeder"] + parts["stack"]}, n)
                for n in IMAGE_CORES}}


def markdown_images(results: dict[str, Any]) -> str:
    """The images model as Markdown.

    Example:
        >>> r = {"parts_us_per_image": {"feeder": 10.0, "map": 900.0, "consumer": 1.0,
        ...                             "stack": 70.0}, "serial_us_per_image": 11.0,
        ...      "predicted_images_per_s": {"16": 17000.0},
        ...      "predicted_per_image_form": {"16": 12000.0}}
        >>> print(markdown_images(r).splitlines()[-2])
        | batched form: predicted images/s | 17,000 |
    """
    parts = results["parts_us_per_image"]
    serial = {"feeder", "consumer", "stack"}
    lines = ["### Scaling model (images: JPEG TFRecords, feedline batched form, threads)", "",
             "| part | CPU µs per image | bound alone (images/s) |", "|---|---|---|"]
    for name, us in parts.items():
        label = name + (" (per-image form only)" if name == "stack" else "")
        bound = f"{1e6 / us:,.0f}" if name in serial else "scales with cores"
        lines.append(f"| {label} | {us:.1f} | {bound} |")
    predicted = results["predicted_images_per_s"]
    lines += ["", f"Serial CPU per image (feeder + consumer): "
                  f"{results['serial_us_per_image']:.1f} µs (goal: at most 20 µs).", "",
              "| cores | " + " | ".join(predicted) + " |",
              "|---|" + "---|" * len(predicted),
              "| batched form: predicted images/s | " + " | ".join(
                  f"{v:,.0f}" for v in predicted.values()) + " |",
              "| per-image form (stack in the feeder): predicted images/s | " + " | ".join(
                  f"{v:,.0f}" for v in results["predicted_per_image_form"].values()) + " |"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chess-data", help="folder of generated chess data "
                                             "(default: generate into benchmarks/.cache)")
    parser.add_argument("--small", action="store_true", help="the --small data size")
    parser.add_argument("--examples", type=int, default=MEASURED_EXAMPLES,
                        help="examples the feeder's cost is measured over")
    parser.add_argument("--workload", choices=("chess", "images"), default="chess",
                        help="the pipeline to model (default %(default)s)")
    parser.add_argument("--images", type=int, default=MEASURED_IMAGES,
                        help="images the images feeder's cost is measured over")
    parser.add_argument("--json", help="write the results here as JSON")
    args = parser.parse_args(argv)
    if args.workload == "images":
        sizes = data_mod.Sizes.small() if args.small else data_mod.Sizes()
        meta = data_mod.images_tfrecord(sizes.images, sizes.image_record_files, 1234)
        results = measure_images(meta["files"], np.load(meta["params"]), args.images)
        results["ok"] = True
        return emit(results, markdown_images(results), args.json)
    meta = data_mod.chess_meta(args.chess_data, args.small)
    results = measure(meta["files"], args.examples)
    results["ok"] = True
    return emit(results, markdown(results), args.json)


if __name__ == "__main__":
    sys.exit(main())
