"""feedline, written the way its documentation recommends.

Batch first, then do the per-batch work in one vectorized function (``parse_example`` on the
whole batch plus NumPy), run that ``map`` with ``num_parallel_calls=AUTOTUNE`` (threads: NumPy,
file reads and JPEG decoding release the GIL), and ``prefetch`` at the end. Pure-Python
functions that hold the GIL go to ``executor="process"``.

Images decode and augment with ``feedline.image`` (libjpeg-turbo and NumPy, the GIL
released), in a threaded ``map`` per image, then ``batch``. Variant ``batched`` (images and
images_tfrecord): batch the paths (or the encoded records) first, then one ``map`` decodes the
batch's crop windows (``decode_and_crop_jpeg`` with one window per image), flips the flagged
images and normalizes the whole batch: the batching before the map moves bytes, not pixels.

Variant ``processes`` (chess and images): the same pipeline followed by
``.multiprocess(N)``: all of it runs in ``N`` worker processes, each on a shard of the input
(files for chess, elements for images), batches returned through shared memory.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from benchmarks import common
from benchmarks.common import RunSpec

IMAGE_WORKLOADS = ("images", "images_tfrecord")

fl: Any = None


def prepare(spec: RunSpec) -> None:
    global fl
    import feedline

    fl = feedline


def notes(spec: RunSpec) -> str:
    if spec.variant == "processes":
        return f"multiprocess({_workers(spec)})"
    if spec.workload in ("images", "images_tfrecord"):
        return ("threads, feedline.image, batch then decode" if spec.variant == "batched"
                else "threads, feedline.image")
    if spec.workload == "python_heavy":
        return "executor='process'"
    return ""


def cleanup(iterable: Any, iterator: Any) -> None:
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def _workers(spec: RunSpec) -> int:
    """Worker processes of the ``processes`` variant: the tuned count, else one per core.

    One in check mode: a single worker reads every file in order, so its batches are the
    reference's, through the same processes and shared memory.
    """
    if spec.ordered:
        return 1
    return int(spec.extra.get("workers") or os.cpu_count() or 1)


def build(spec: RunSpec) -> Any:
    if spec.variant == "batched" and spec.workload not in IMAGE_WORKLOADS:
        raise ValueError(f"variant 'batched' is for {IMAGE_WORKLOADS}, not {spec.workload!r}")
    ds = {"chess": _chess, "images": _images, "images_tfrecord": _images_tfrecord,
          "overhead": _overhead, "python_heavy": _python_heavy,
          "shuffle_memory": _shuffle_memory,
          }[spec.workload](spec)
    if spec.variant == "processes":
        if spec.workload not in ("chess", *IMAGE_WORKLOADS):
            raise ValueError(f"variant 'processes' is for chess and images, not "
                             f"{spec.workload!r}")
        ds = ds.multiprocess(_workers(spec))
    return ds


# ----------------------------------------------------------------------------- chess
def _chess(spec: RunSpec) -> Any:
    features = {"d": fl.FixedLenFeature([], "bytes"), "s": fl.FixedLenFeature([], "int64")}

    def parse_batch(serialized: np.ndarray) -> dict[str, np.ndarray]:
        parsed = fl.parse_example(serialized, features)
        d = np.frombuffer(b"".join(parsed["d"]), dtype=np.uint8).reshape(len(serialized), -1)
        return common.chess_transform(d, parsed["s"])

    # Files read inline, one after the other: on 2 cores reader threads only compete with
    # the parse (measured: ~160k vs ~110k examples/s with num_parallel_reads=2).
    ds = fl.TFRecordDataset(spec.data["files"])
    if spec.shuffle:
        ds = ds.shuffle(common.CHESS_SHUFFLE_BUFFER, seed=spec.seed)
    ds = ds.batch(common.CHESS_BATCH)
    ds = ds.map(parse_batch, num_parallel_calls=fl.AUTOTUNE)
    return ds.prefetch(fl.AUTOTUNE)


# ----------------------------------------------------------------------------- images
# tf.io.decode_jpeg's accurate IDCT, as tf.data's expert pipeline and the shared decoders use:
# every system does the same work.
DCT = "INTEGER_ACCURATE"


def _read(path: Any) -> bytes:
    # A string tensor's element is bytes (as in tf.data), or a NumPy str.
    with open(path if isinstance(path, bytes) else str(path), "rb") as f:
        return f.read()


def augment_one(jpeg: bytes, dy: Any, dx: Any, flip: Any) -> np.ndarray:
    """Decode one JPEG, crop 224x224 at ``(dy, dx)``, flip if asked, ImageNet-normalize."""
    # Imported here, not through the module's ``fl``: worker processes (the ``processes``
    # variant) run this function without calling prepare().
    import feedline.image as image_ops

    image = image_ops.decode_jpeg(jpeg, channels=3, dct_method=DCT)
    crop = image_ops.crop_to_bounding_box(image, int(dy), int(dx), common.CROP, common.CROP)
    if flip:
        crop = image_ops.flip_left_right(crop)
    return image_ops.normalize(crop, common.IMAGENET_MEAN, common.IMAGENET_STD)


def augment_batch(jpegs: Any, dy: np.ndarray, dx: np.ndarray, flip: np.ndarray) -> np.ndarray:
    """:func:`augment_one` of a batch with feedline.image's batch forms: each image's crop
    window decoded into one ``[N, 224, 224, 3]`` array, the flagged ones flipped, then one
    normalize of the whole batch."""
    import feedline.image as image_ops

    size = np.full(len(dy), common.CROP)
    windows = np.stack([dy, dx, size, size], axis=1).astype(np.int64)
    crops = image_ops.decode_and_crop_jpeg(jpegs, windows, channels=3, dct_method=DCT)
    flagged = np.flatnonzero(flip)
    if len(flagged):
        crops[flagged] = image_ops.flip_left_right(crops[flagged])
    return image_ops.normalize(crops, common.IMAGENET_MEAN, common.IMAGENET_STD)


def _images(spec: RunSpec) -> Any:
    params = common.image_params(spec.data)
    ds = fl.Dataset.from_tensor_slices(
        (np.array(spec.data["files"]), params[:, 0], params[:, 1], params[:, 2]))
    if spec.shuffle:
        ds = ds.shuffle(len(spec.data["files"]), seed=spec.seed)
    if spec.variant == "batched":
        # Paths batched, not pixels: the map reads and decodes the whole batch.
        ds = ds.batch(common.IMAGE_BATCH).map(
            lambda paths, dy, dx, flip: augment_batch([_read(p) for p in paths], dy, dx, flip),
            num_parallel_calls=fl.AUTOTUNE)
        return ds.prefetch(fl.AUTOTUNE)
    ds = ds.map(lambda path, dy, dx, flip: augment_one(_read(path), dy, dx, flip),
                num_parallel_calls=fl.AUTOTUNE)
    return ds.batch(common.IMAGE_BATCH).prefetch(fl.AUTOTUNE)


def _images_tfrecord(spec: RunSpec) -> Any:
    params = np.load(spec.data["params"])
    features = {common.IMAGE_KEY: fl.FixedLenFeature([], "bytes"),
                common.LABEL_KEY: fl.FixedLenFeature([], "int64"),
                common.INDEX_KEY: fl.FixedLenFeature([], "int64")}
    ds = fl.TFRecordDataset(spec.data["files"])
    if spec.shuffle:
        ds = ds.shuffle(common.IMAGE_RECORD_SHUFFLE, seed=spec.seed)

    if spec.variant == "batched":
        def parse_batch(records: np.ndarray) -> dict[str, np.ndarray]:
            parsed = fl.parse_example(records, features)
            rows = params[parsed[common.INDEX_KEY]]
            return {"image": augment_batch(parsed[common.IMAGE_KEY], rows[:, 0], rows[:, 1],
                                           rows[:, 2]),
                    "label": parsed[common.LABEL_KEY]}

        ds = ds.batch(common.IMAGE_BATCH).map(parse_batch, num_parallel_calls=fl.AUTOTUNE)
        return ds.prefetch(fl.AUTOTUNE)

    def parse_one(record: bytes) -> dict[str, Any]:
        parsed = fl.parse_single_example(record, features)
        dy, dx, flip = params[int(parsed[common.INDEX_KEY])]
        return {"image": augment_one(parsed[common.IMAGE_KEY], dy, dx, flip),
                "label": parsed[common.LABEL_KEY]}

    ds = ds.map(parse_one, num_parallel_calls=fl.AUTOTUNE)
    return ds.batch(common.IMAGE_BATCH).prefetch(fl.AUTOTUNE)


# ----------------------------------------------------------------------------- overhead
def _overhead(spec: RunSpec) -> Any:
    ds = fl.Dataset.range(spec.data["count"]).map(lambda x: x + 1)
    return ds.filter(lambda x: x % 2 == 0).batch(common.OVERHEAD_BATCH)


# ----------------------------------------------------------------------------- python-heavy
def _python_heavy(spec: RunSpec) -> Any:
    from benchmarks.data import read_lines

    ds = fl.Dataset.from_tensor_slices(np.array(read_lines(spec.data), dtype=object))
    ds = ds.map(common.tokenize, num_parallel_calls=fl.AUTOTUNE, executor="process")
    return ds.batch(common.TEXT_BATCH).prefetch(fl.AUTOTUNE)


# ----------------------------------------------------------------------------- shuffle memory
def _shuffle_memory(spec: RunSpec) -> Any:
    nbytes = spec.data["element_bytes"]
    ds = fl.Dataset.range(spec.data["count"]).map(lambda i: common.shuffle_element(i, nbytes))
    if spec.shuffle:
        ds = ds.shuffle(spec.data["buffer"], seed=spec.seed)
    return ds
