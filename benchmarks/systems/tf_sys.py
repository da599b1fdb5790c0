"""tf.data: the expert way (vectorized, AUTOTUNE everywhere) and the tutorial way.

Expert: read files in parallel, shuffle serialized records, batch *then* parse (one
``parse_example`` call per batch) and transform with TensorFlow ops on whole batches; parallel
``map`` and ``prefetch`` with ``AUTOTUNE``. Naive: what a newcomer writes after the tutorials:
parse and transform one example at a time, no parallelism, no prefetch.
"""

from __future__ import annotations

import os
from typing import Any

from benchmarks import common
from benchmarks.common import RunSpec

tf: Any = None


def prepare(spec: RunSpec) -> None:
    global tf
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow

    tf = tensorflow
    tf.random.set_seed(spec.seed)


def notes(spec: RunSpec) -> str:
    if spec.workload in ("images", "images_tfrecord"):
        if spec.variant == "fused":
            return "tf.io.decode_and_crop_jpeg (accurate DCT); tf.image flip/normalize"
        return "tf.io.decode_jpeg (libjpeg-turbo, accurate DCT); tf.image crop/flip/normalize"
    if spec.workload == "python_heavy":
        return "tf.numpy_function (threads, GIL-bound)"
    return ""


def cleanup(iterable: Any, iterator: Any) -> None:
    del iterable, iterator


def build(spec: RunSpec) -> Any:
    # "fused" is the expert pipeline with tf.io.decode_and_crop_jpeg (images only).
    expert = spec.variant in ("expert", "fused")
    return {"chess": _chess, "images": _images, "images_tfrecord": _images_tfrecord,
            "overhead": _overhead,
            "python_heavy": _python_heavy, "shuffle_memory": _shuffle_memory,
            }[spec.workload](spec, expert)


def _autotune(expert: bool) -> Any:
    return tf.data.AUTOTUNE if expert else None


# ----------------------------------------------------------------------------- chess
_FEATURES: dict[str, Any] = {}


def _features() -> dict[str, Any]:
    if not _FEATURES:
        _FEATURES["d"] = tf.io.FixedLenFeature([], tf.string)
        _FEATURES["s"] = tf.io.FixedLenFeature([], tf.int64)
    return _FEATURES


def chess_transform_tf(d: Any, s: Any) -> dict[str, Any]:
    """``common.chess_transform`` in TensorFlow ops, on a batch (``d``: ``(n,)`` strings)."""
    raw = tf.io.decode_raw(d, tf.uint8)  # (n, 194)
    shifts = tf.constant([7, 6, 5, 4, 3, 2, 1, 0], tf.uint8)
    bits = tf.bitwise.bitwise_and(tf.bitwise.right_shift(raw[:, :, None], shifts), 1)
    bits = tf.reshape(bits, [-1, common.CHESS_BITS])
    board = tf.reshape(bits[:, :1536], [-1, 8, 8, 24])
    board = tf.gather(board, common.CHESS_CHANNELS, axis=3)
    board = tf.cast(board, tf.float32) * common.CHESS_SIGN
    flags = tf.cast(bits[:, 1536:1546], tf.float32)
    m = tf.cast(bits[:, 1546], tf.float32)
    s = tf.cast(s, tf.float32)
    a, k, b = common.SCORE_A, common.SCORE_K, common.SCORE_B
    soft = a * tf.tanh(s / k)
    hard = tf.sign(s) * (a + (1 - a) / (b - 1) * tf.maximum(0.0, b - tf.abs(s)))
    return {"board": board, "flags": flags, "score": (1 - m) * soft + m * hard}


def _chess(spec: RunSpec, expert: bool) -> Any:
    files = spec.data["files"]
    if expert:
        # Sequential reads: on 2 local cores num_parallel_reads=AUTOTUNE only competes with
        # the parse (measured: ~71k vs ~39k examples/s). Parallel reads pay off on remote
        # storage, which this benchmark does not use.
        ds = tf.data.TFRecordDataset(files)
        if spec.shuffle:
            ds = ds.shuffle(common.CHESS_SHUFFLE_BUFFER, seed=spec.seed)
        ds = ds.batch(common.CHESS_BATCH)

        def parse_batch(serialized: Any) -> dict[str, Any]:
            parsed = tf.io.parse_example(serialized, _features())
            return chess_transform_tf(parsed["d"], parsed["s"])

        ds = ds.map(parse_batch, num_parallel_calls=tf.data.AUTOTUNE)
        return ds.prefetch(tf.data.AUTOTUNE)

    ds = tf.data.TFRecordDataset(files)
    if spec.shuffle:
        ds = ds.shuffle(common.CHESS_SHUFFLE_BUFFER, seed=spec.seed)

    def parse_one(serialized: Any) -> dict[str, Any]:
        parsed = tf.io.parse_single_example(serialized, _features())
        out = chess_transform_tf(parsed["d"][None], parsed["s"][None])
        return {key: value[0] for key, value in out.items()}

    return ds.map(parse_one).batch(common.CHESS_BATCH)


# ----------------------------------------------------------------------------- images
def _image_source(spec: RunSpec) -> Any:
    params = common.image_params(spec.data)
    ds = tf.data.Dataset.from_tensor_slices(
        (spec.data["files"], params[:, 0], params[:, 1], params[:, 2]))
    if spec.shuffle:
        ds = ds.shuffle(len(spec.data["files"]), seed=spec.seed)
    return ds


def _augment_tf(jpeg: Any, dy: Any, dx: Any, flip: Any, dct: str, fused: bool = False) -> Any:
    """Decode (only the crop window's rows with ``fused``), crop, flip, normalize: tf.image."""
    dy, dx = tf.cast(dy, tf.int32), tf.cast(dx, tf.int32)
    if fused:
        window = tf.stack([dy, dx, common.CROP, common.CROP])
        crop = tf.io.decode_and_crop_jpeg(jpeg, window, channels=3, dct_method=dct)
    else:
        image = tf.io.decode_jpeg(jpeg, channels=3, dct_method=dct)
        crop = tf.image.crop_to_bounding_box(image, dy, dx, common.CROP, common.CROP)
    crop = tf.cond(flip > 0, lambda: tf.image.flip_left_right(crop), lambda: crop)
    crop.set_shape([common.CROP, common.CROP, 3])
    crop = tf.image.convert_image_dtype(crop, tf.float32)
    return (crop - common.IMAGENET_MEAN) / common.IMAGENET_STD


def _images(spec: RunSpec, expert: bool) -> Any:
    ds = _image_source(spec)
    fused = spec.variant == "fused"
    if expert:
        ds = ds.map(lambda p, y, x, f: _augment_tf(tf.io.read_file(p), y, x, f,
                                                   "INTEGER_ACCURATE", fused),
                    num_parallel_calls=tf.data.AUTOTUNE)
        return ds.batch(common.IMAGE_BATCH).prefetch(tf.data.AUTOTUNE)
    return ds.map(lambda p, y, x, f: _augment_tf(tf.io.read_file(p), y, x, f, "")).batch(
        common.IMAGE_BATCH)


def _images_tfrecord(spec: RunSpec, expert: bool) -> Any:
    """ImageNet-style TFRecords: shuffle records, parse, decode and augment each, batch."""
    import numpy as np

    params = tf.constant(np.load(spec.data["params"]))
    features = {common.IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
                common.LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
                common.INDEX_KEY: tf.io.FixedLenFeature([], tf.int64)}
    fused = spec.variant == "fused"
    dct = "INTEGER_ACCURATE" if expert else ""

    def parse(record: Any) -> dict[str, Any]:
        parsed = tf.io.parse_single_example(record, features)
        row = tf.gather(params, parsed[common.INDEX_KEY])
        image = _augment_tf(parsed[common.IMAGE_KEY], row[0], row[1], row[2], dct, fused)
        return {"image": image, "label": parsed[common.LABEL_KEY]}

    ds = tf.data.TFRecordDataset(spec.data["files"])
    if spec.shuffle:
        ds = ds.shuffle(common.IMAGE_RECORD_SHUFFLE, seed=spec.seed)
    ds = ds.map(parse, num_parallel_calls=_autotune(expert)).batch(common.IMAGE_BATCH)
    return ds.prefetch(tf.data.AUTOTUNE) if expert else ds


# ----------------------------------------------------------------------------- overhead
def _overhead(spec: RunSpec, expert: bool) -> Any:
    ds = tf.data.Dataset.range(spec.data["count"])
    ds = ds.map(lambda x: x + 1, num_parallel_calls=_autotune(expert))
    ds = ds.filter(lambda x: x % 2 == 0).batch(common.OVERHEAD_BATCH)
    return ds.prefetch(tf.data.AUTOTUNE) if expert else ds


# ----------------------------------------------------------------------------- python-heavy
def _python_heavy(spec: RunSpec, expert: bool) -> Any:
    ds = tf.data.TextLineDataset(spec.data["path"])

    def tokenize(line: Any) -> Any:
        ids = tf.numpy_function(common.tokenize, [line], tf.int32)
        ids.set_shape([common.TOKENS])
        return ids

    ds = ds.map(tokenize, num_parallel_calls=_autotune(expert)).batch(common.TEXT_BATCH)
    return ds.prefetch(tf.data.AUTOTUNE) if expert else ds


# ----------------------------------------------------------------------------- shuffle memory
def _shuffle_memory(spec: RunSpec, expert: bool) -> Any:
    nbytes = spec.data["element_bytes"]
    ds = tf.data.Dataset.range(spec.data["count"])
    ds = ds.map(lambda i: tf.fill([nbytes], tf.cast(i % 251, tf.uint8)))
    if spec.shuffle:
        ds = ds.shuffle(spec.data["buffer"], seed=spec.seed)
    return ds
