"""Grain: the expert way (its documented best options) and the way a newcomer writes it.

Expert: random-access ``MapDataset`` sources where the data allows (images, text), global
index shuffles, per-batch work in ``batch_fn``, and ``mp_prefetch`` with one worker process
per core; TFRecord files through ``experimental.InterleaveIterDataset`` over
``experimental.TFRecordIterDataset`` (each worker reads its slice of the files) and
``WindowShuffleIterDataset`` for the shuffle buffer. Naive: the same sources, per-element
``map`` then ``batch``, and ``to_iter_dataset()`` with its default read threads, no processes.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from benchmarks import common
from benchmarks.common import RunSpec

grain: Any = None
WORKERS = int(os.environ.get("BENCH_GRAIN_WORKERS", "2"))


def prepare(spec: RunSpec) -> None:
    global grain
    import logging

    logging.getLogger("absl").setLevel(logging.ERROR)
    import grain as grain_module

    grain = grain_module


def notes(spec: RunSpec) -> str:
    workers = _workers(spec)
    decoder = ""
    if spec.workload in ("images", "images_tfrecord"):
        decoder = (", grain.transforms.Map decoding with PIL" if spec.variant == "pil"
                   else f", {spec.data.get('decoder')}")
    return (f"mp_prefetch num_workers={workers}" if workers else "threads") + decoder


def _workers(spec: RunSpec) -> int:
    if spec.variant not in ("expert", "pil") or spec.workload in ("overhead", "shuffle_memory"):
        return 0
    if spec.ordered and spec.workload in ("chess", "images_tfrecord"):
        return 0  # workers read different files: the check needs the files' order
    return int(spec.extra.get("workers") or WORKERS)


def cleanup(iterable: Any, iterator: Any) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def _finish(ds: Any, spec: RunSpec) -> Any:
    workers = _workers(spec)
    if isinstance(ds, grain.MapDataset):
        # Inside each mp_prefetch worker, the default read-ahead (16 threads, 500 elements,
        # here whole batches of 64 images) made the first batch take ~6 s and the process
        # tree ~2 GB on 2 cores; 2 threads and 8 batches: ~0.9 s, ~0.4 GB and a higher rate.
        read = (grain.ReadOptions(num_threads=2, prefetch_buffer_size=8)
                if workers and spec.workload in ("images", "images_tfrecord") else None)
        ds = ds.to_iter_dataset(read)
    if workers:
        return ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers,
                                                           per_worker_buffer_size=4))
    return ds


def build(spec: RunSpec) -> Any:
    expert = spec.variant in ("expert", "pil")
    return {"chess": _chess, "images": _images, "images_tfrecord": _images_tfrecord,
            "overhead": _overhead,
            "python_heavy": _python_heavy, "shuffle_memory": _shuffle_memory,
            }[spec.workload](spec, expert)


# ----------------------------------------------------------------------------- chess
def _parse_records(records: Any) -> tuple[np.ndarray, np.ndarray]:
    from tfrecord import example_pb2

    d = np.empty((len(records), common.CHESS_RECORD_BYTES), dtype=np.uint8)
    s = np.empty(len(records), dtype=np.int64)
    example = example_pb2.Example()
    for i, record in enumerate(records):
        example.ParseFromString(record)
        feature = example.features.feature
        d[i] = np.frombuffer(feature["d"].bytes_list.value[0], dtype=np.uint8)
        s[i] = feature["s"].int64_list.value[0]
    return d, s


def _parse_and_transform(records: Any) -> dict[str, np.ndarray]:
    return common.chess_transform(*_parse_records(records))


def _parse_one(record: bytes) -> dict[str, np.ndarray]:
    out = _parse_and_transform([record])
    return {key: value[0] for key, value in out.items()}


def _chess(spec: RunSpec, expert: bool) -> Any:
    files = grain.MapDataset.source(spec.data["files"])
    sources = files.map(grain.experimental.TFRecordIterDataset)
    # One file at a time in each worker: on 2 cores, cycle_length=4 was slower (measured
    # ~18k vs ~25k examples/s with 2 workers); mp_prefetch already reads 2 files at once.
    ds = grain.experimental.InterleaveIterDataset(sources, cycle_length=1)
    if spec.shuffle:
        ds = grain.experimental.WindowShuffleIterDataset(
            ds, window_size=common.CHESS_SHUFFLE_BUFFER, seed=spec.seed)
    if expert:
        ds = ds.batch(common.CHESS_BATCH, batch_fn=_parse_and_transform)
    else:
        ds = ds.map(_parse_one).batch(common.CHESS_BATCH)
    return _finish(ds, spec)


# ----------------------------------------------------------------------------- images
def _pil_decode(jpeg: bytes) -> np.ndarray:
    """Grain's tutorials' decoder: PIL (libjpeg-turbo, accurate IDCT) to a NumPy array."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(jpeg)) as image:
        return np.asarray(image.convert("RGB"))


def _decode_augment_transform(params: np.ndarray, decoder: str, pil: bool) -> Any:
    """A ``grain.transforms.Map`` (grain's documented way to write a preprocessing step):
    ``(jpeg, index[, label])`` to the augmented image (with its label)."""

    class DecodeAndAugment(grain.transforms.Map):
        def map(self, element: tuple[Any, ...]) -> Any:
            jpeg, index = element[0], int(element[1])
            image = _pil_decode(jpeg) if pil else common.decode_jpeg(jpeg, decoder)
            out = common.crop_flip_normalize(image, *(int(v) for v in params[index]))
            return out if len(element) == 2 else {"image": out, "label": element[2]}

    return DecodeAndAugment()


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _images(spec: RunSpec, expert: bool) -> Any:
    files = spec.data["files"]
    params = common.image_params(spec.data)
    decoder = spec.data["decoder"]
    ds = grain.MapDataset.range(len(files))
    if spec.shuffle:
        ds = ds.shuffle(seed=spec.seed)
    if spec.variant == "pil":
        ds = ds.map(lambda i: (_read_file(files[i]), i))
        ds = ds.map(_decode_augment_transform(params, decoder, pil=True))
    else:
        ds = ds.map(lambda i: common.load_and_augment(files[i], *params[i], decoder))
    ds = ds.batch(common.IMAGE_BATCH)
    return _finish(ds, spec)


def _images_tfrecord(spec: RunSpec, expert: bool) -> Any:
    """ImageNet-style TFRecords as chess reads them (one file at a time per worker), a window
    shuffle of the records, per-record parse + decode + augment, batch."""
    from tfrecord import example_pb2

    params = np.load(spec.data["params"])
    files = grain.MapDataset.source(spec.data["files"])
    ds = grain.experimental.InterleaveIterDataset(
        files.map(grain.experimental.TFRecordIterDataset), cycle_length=1)
    if spec.shuffle:
        ds = grain.experimental.WindowShuffleIterDataset(
            ds, window_size=common.IMAGE_RECORD_SHUFFLE, seed=spec.seed)

    def parse(record: bytes) -> tuple[bytes, int, int]:
        jpeg, label, index = common.parse_image_record(record, example_pb2)
        return jpeg, index, label

    ds = ds.map(parse).map(_decode_augment_transform(params, spec.data["decoder"],
                                                     pil=spec.variant == "pil"))
    return _finish(ds.batch(common.IMAGE_BATCH), spec)


# ----------------------------------------------------------------------------- overhead
def _overhead(spec: RunSpec, expert: bool) -> Any:
    ds = grain.MapDataset.range(spec.data["count"]).map(lambda x: x + 1)
    # A MapDataset cannot batch after filter (grain says so): filter an IterDataset. The
    # expert turns off the read threads, which only add hand-offs for work this small.
    options = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0) if expert else None
    ds = ds.to_iter_dataset(options)
    return ds.filter(lambda x: x % 2 == 0).batch(common.OVERHEAD_BATCH)


# ----------------------------------------------------------------------------- python-heavy
def _python_heavy(spec: RunSpec, expert: bool) -> Any:
    from benchmarks.data import read_lines

    ds = grain.MapDataset.source(read_lines(spec.data)).map(common.tokenize)
    return _finish(ds.batch(common.TEXT_BATCH), spec)


# ----------------------------------------------------------------------------- shuffle memory
def _shuffle_memory(spec: RunSpec, expert: bool) -> Any:
    nbytes = spec.data["element_bytes"]
    ds = grain.MapDataset.range(spec.data["count"]).map(
        lambda i: common.shuffle_element(i, nbytes))
    ds = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    if spec.shuffle:
        ds = grain.experimental.WindowShuffleIterDataset(ds, window_size=spec.data["buffer"],
                                                         seed=spec.seed)
    return ds
