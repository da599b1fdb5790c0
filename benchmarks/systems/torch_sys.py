"""PyTorch ``DataLoader``: the expert way and the way a newcomer writes it.

Expert: an ``IterableDataset`` that shards the files over the DataLoader's worker processes,
keeps a shuffle buffer, and does the work per *batch* inside the workers (vectorized NumPy),
handing the DataLoader whole batches (``batch_size=None``); ``num_workers=2`` (the machine's
cores; measured best on 2 cores), ``persistent_workers`` off (one epoch), ``prefetch_factor=4``.
Naive: the ``tfrecord`` package's ``TFRecordDataset`` (per-example parse), a per-example
transform, the default collate, ``num_workers=0``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from typing import Any

import numpy as np

from benchmarks import common
from benchmarks.common import RunSpec

torch: Any = None
WORKERS = int(os.environ.get("BENCH_TORCH_WORKERS", "2"))
IMAGE_WORKLOADS = ("images", "images_tfrecord")


def prepare(spec: RunSpec) -> None:
    global torch
    import torch as torch_module

    torch = torch_module
    torch.manual_seed(spec.seed)
    # One intra-op thread per process: the DataLoader's parallelism is its workers.
    torch.set_num_threads(1)


def notes(spec: RunSpec) -> str:
    workers = _workers(spec)
    decoder = ""
    if spec.workload in IMAGE_WORKLOADS:
        decoder = (", torchvision.io.decode_jpeg + transforms.v2"
                   if spec.variant == "torchvision" else f", {spec.data.get('decoder')}")
    return f"num_workers={workers}{decoder}"


def _workers(spec: RunSpec) -> int:
    if spec.variant not in ("expert", "torchvision"):
        return 0
    if spec.workload in ("overhead", "shuffle_memory"):
        return 0  # the work per element is too small to pay for inter-process transport
    if spec.ordered and spec.workload in ("chess", "images_tfrecord"):
        # Workers read different files and take turns: the check needs the files' order.
        return 0
    return int(spec.extra.get("workers") or WORKERS)


def cleanup(iterable: Any, iterator: Any) -> None:
    # Ends the worker processes now rather than at garbage collection.
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


def _loader(dataset: Any, spec: RunSpec, **kwargs: Any) -> Any:
    workers = _workers(spec)
    if workers:
        kwargs.setdefault("prefetch_factor", 4)
    if spec.extra.get("pin_memory"):
        kwargs["pin_memory"] = True  # page-locked batches for the GPU (benchmarks/gpu_feed.py)
    return torch.utils.data.DataLoader(dataset, num_workers=workers, **kwargs)


def build(spec: RunSpec) -> Any:
    expert = spec.variant in ("expert", "torchvision")
    return {"chess": _chess, "images": _images, "images_tfrecord": _images_tfrecord,
            "overhead": _overhead,
            "python_heavy": _python_heavy, "shuffle_memory": _shuffle_memory,
            }[spec.workload](spec, expert)


def _my_share(items: list[Any]) -> list[Any]:
    """This DataLoader worker's part of ``items`` (all of them in the main process)."""
    info = torch.utils.data.get_worker_info()
    return items if info is None else items[info.id::info.num_workers]


def _shuffled(items: Iterator[Any], buffer: int, rng: random.Random) -> Iterator[Any]:
    """A shuffle buffer (as tf.data's): yield a random buffered item, refill from input."""
    pool: list[Any] = []
    for item in items:
        if len(pool) < buffer:
            pool.append(item)
            continue
        i = rng.randrange(buffer)
        yield pool[i]
        pool[i] = item
    rng.shuffle(pool)
    yield from pool


def _to_torch(batch: dict[str, np.ndarray]) -> dict[str, Any]:
    return {key: torch.from_numpy(value) for key, value in batch.items()}


# ----------------------------------------------------------------------------- chess
def _parse_records(records: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
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


def _chess(spec: RunSpec, expert: bool) -> Any:
    files = spec.data["files"]
    if not expert:
        return _chess_naive(spec)

    class ChessRecords(torch.utils.data.IterableDataset):
        def __iter__(self) -> Iterator[dict[str, Any]]:
            from tfrecord.reader import tfrecord_iterator

            info = torch.utils.data.get_worker_info()
            rng = random.Random(spec.seed + (info.id if info else 0))
            records = (bytes(r) for path in _my_share(files) for r in tfrecord_iterator(path))
            if spec.shuffle:
                workers = info.num_workers if info else 1
                records = _shuffled(records, common.CHESS_SHUFFLE_BUFFER // workers, rng)
            batch: list[bytes] = []
            for record in records:
                batch.append(record)
                if len(batch) == common.CHESS_BATCH:
                    yield _to_torch(common.chess_transform(*_parse_records(batch)))
                    batch = []
            if batch:
                yield _to_torch(common.chess_transform(*_parse_records(batch)))

    return _loader(ChessRecords(), spec, batch_size=None)


def _chess_naive(spec: RunSpec) -> Any:
    from tfrecord.torch.dataset import TFRecordDataset

    def transform(features: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        d = np.frombuffer(features["d"], dtype=np.uint8)[None]
        out = common.chess_transform(d, np.asarray(features["s"])[:1])
        return {key: value[0] for key, value in out.items()}

    shuffle = common.CHESS_SHUFFLE_BUFFER if spec.shuffle else None
    parts = [TFRecordDataset(path, None, {"d": "byte", "s": "int"}, shuffle_queue_size=shuffle,
                             transform=transform) for path in spec.data["files"]]
    return _loader(torch.utils.data.ChainDataset(parts), spec, batch_size=common.CHESS_BATCH)


# ----------------------------------------------------------------------------- images
def _torchvision_augment(jpeg: Any, dy: int, dx: int, flip: int) -> Any:
    """torchvision's own path: ``io.decode_jpeg`` (libjpeg-turbo, accurate IDCT) to a CHW
    uint8 tensor, ``transforms.v2.functional`` crop, flip, ``to_dtype(scale=True)`` and
    normalize; returned HWC (a view) so that every system's batch has one layout."""
    from torchvision.io import decode_jpeg
    from torchvision.transforms.v2 import functional as F

    image = decode_jpeg(jpeg, mode=ImageReadMode_RGB())
    crop = F.crop(image, int(dy), int(dx), common.CROP, common.CROP)
    if flip:
        crop = F.horizontal_flip(crop)
    crop = F.to_dtype(crop, torch.float32, scale=True)
    crop = F.normalize(crop, common.IMAGENET_MEAN.tolist(), common.IMAGENET_STD.tolist())
    return crop.permute(1, 2, 0)


def ImageReadMode_RGB() -> Any:  # noqa: N802 - torchvision's enum member, looked up late
    from torchvision.io import ImageReadMode

    return ImageReadMode.RGB


def _images(spec: RunSpec, expert: bool) -> Any:
    files = spec.data["files"]
    params = common.image_params(spec.data)
    decoder = spec.data["decoder"]
    vision = spec.variant == "torchvision"

    class Images(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(files)

        def __getitem__(self, i: int) -> Any:
            if vision:
                from torchvision.io import read_file

                return _torchvision_augment(read_file(files[i]), *params[i])
            return torch.from_numpy(common.load_and_augment(files[i], *params[i], decoder))

    generator = torch.Generator().manual_seed(spec.seed)
    return _loader(Images(), spec, batch_size=common.IMAGE_BATCH, shuffle=spec.shuffle,
                   generator=generator)


def _images_tfrecord(spec: RunSpec, expert: bool) -> Any:
    """ImageNet-style TFRecords: an ``IterableDataset`` reading its worker's share of the
    files (``tfrecord_iterator``), a shuffle buffer, per-record parse + decode + augment;
    the DataLoader batches (each worker its own batches)."""
    files = spec.data["files"]
    params = np.load(spec.data["params"])
    decoder = spec.data["decoder"]
    vision = spec.variant == "torchvision"

    class Records(torch.utils.data.IterableDataset):
        def __iter__(self) -> Iterator[dict[str, Any]]:
            from tfrecord import example_pb2
            from tfrecord.reader import tfrecord_iterator

            info = torch.utils.data.get_worker_info()
            rng = random.Random(spec.seed + (info.id if info else 0))
            records = (bytes(r) for path in _my_share(files) for r in tfrecord_iterator(path))
            if spec.shuffle:
                workers = info.num_workers if info else 1
                records = _shuffled(records, common.IMAGE_RECORD_SHUFFLE // workers, rng)
            for record in records:
                jpeg, label, index = common.parse_image_record(record, example_pb2)
                if vision:
                    data = torch.frombuffer(bytearray(jpeg), dtype=torch.uint8)
                    image = _torchvision_augment(data, *params[index])
                else:
                    image = torch.from_numpy(common.crop_flip_normalize(
                        common.decode_jpeg(jpeg, decoder), *(int(v) for v in params[index])))
                yield {"image": image, "label": label}

    return _loader(Records(), spec, batch_size=common.IMAGE_BATCH)


# ----------------------------------------------------------------------------- overhead
def _overhead(spec: RunSpec, expert: bool) -> Any:
    n = spec.data["count"]

    if expert:
        class Batches(torch.utils.data.IterableDataset):
            # Batches built in the generator: no per-element collate.
            def __iter__(self) -> Iterator[Any]:
                batch: list[int] = []
                for x in range(n):
                    y = x + 1
                    if y % 2 == 0:
                        batch.append(y)
                        if len(batch) == common.OVERHEAD_BATCH:
                            yield torch.tensor(batch)
                            batch = []
                if batch:
                    yield torch.tensor(batch)

        return _loader(Batches(), spec, batch_size=None)

    class Elements(torch.utils.data.IterableDataset):
        def __iter__(self) -> Iterator[int]:
            for x in range(n):
                y = x + 1
                if y % 2 == 0:
                    yield y

    return _loader(Elements(), spec, batch_size=common.OVERHEAD_BATCH)


# ----------------------------------------------------------------------------- python-heavy
def _python_heavy(spec: RunSpec, expert: bool) -> Any:
    from benchmarks.data import read_lines

    lines = read_lines(spec.data)

    class Lines(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(lines)

        def __getitem__(self, i: int) -> Any:
            return torch.from_numpy(common.tokenize(lines[i]))

    return _loader(Lines(), spec, batch_size=common.TEXT_BATCH)


# ----------------------------------------------------------------------------- shuffle memory
def _shuffle_memory(spec: RunSpec, expert: bool) -> Any:
    n, nbytes, buffer = spec.data["count"], spec.data["element_bytes"], spec.data["buffer"]

    class Elements(torch.utils.data.IterableDataset):
        def __iter__(self) -> Iterator[Any]:
            items = (torch.from_numpy(common.shuffle_element(i, nbytes)) for i in range(n))
            if spec.shuffle:
                items = _shuffled(items, buffer, random.Random(spec.seed))
            yield from items

    return _loader(Elements(), spec, batch_size=None)
