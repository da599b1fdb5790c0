"""feedline, written the way its documentation recommends.

Batch first, then do the per-batch work in one vectorized function (``parse_example`` on the
whole batch plus NumPy), run that ``map`` with ``num_parallel_calls=AUTOTUNE`` (threads: NumPy,
file reads and JPEG decoding release the GIL), and ``prefetch`` at the end. Pure-Python
functions that hold the GIL go to ``executor="process"``.

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

fl: Any = None


def prepare(spec: RunSpec) -> None:
    global fl
    import feedline

    fl = feedline


def notes(spec: RunSpec) -> str:
    if spec.variant == "processes":
        return f"multiprocess({_workers(spec)})"
    if spec.workload == "images":
        return f"threads, {spec.data.get('decoder')}"
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
    ds = {"chess": _chess, "images": _images, "overhead": _overhead,
          "python_heavy": _python_heavy, "shuffle_memory": _shuffle_memory,
          }[spec.workload](spec)
    if spec.variant == "processes":
        if spec.workload not in ("chess", "images"):
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
def _images(spec: RunSpec) -> Any:
    params = common.image_params(spec.data)
    decoder = spec.data["decoder"]
    ds = fl.Dataset.from_tensor_slices(
        (np.array(spec.data["files"]), params[:, 0], params[:, 1], params[:, 2]))
    if spec.shuffle:
        ds = ds.shuffle(len(spec.data["files"]), seed=spec.seed)

    def augment(path: Any, dy: Any, dx: Any, flip: Any) -> np.ndarray:
        # A string tensor's element is bytes (as in tf.data), or a NumPy str.
        path = path if isinstance(path, bytes) else str(path)
        return common.load_and_augment(path, dy, dx, flip, decoder)

    ds = ds.map(augment, num_parallel_calls=fl.AUTOTUNE)
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
