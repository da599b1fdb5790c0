"""What every system must output: computed directly with NumPy from the generated data.

The harness compares each system's first batches (in ``check`` mode: canonical order, no
shuffle) with :func:`first_batches`, and each timed epoch's element count and order-free
digest with :func:`epoch_expectation`, so that no system is "fast" by doing less work.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common
from benchmarks.data import image_path, read_lines

BATCH = {"chess": common.CHESS_BATCH, "images": common.IMAGE_BATCH,
         "images_tfrecord": common.IMAGE_BATCH,
         "overhead": common.OVERHEAD_BATCH, "python_heavy": common.TEXT_BATCH,
         "shuffle_memory": 1}
# Absolute tolerance per workload: (largest difference, mean difference). float32 tanh differs
# in the last bits between libraries; TensorFlow's default JPEG IDCT ("INTEGER_FAST") differs
# from the accurate one by a few grey levels (0.07 after normalization). A wrong crop, a missing
# flip or a missing normalization differs by far more than these.
TOLERANCE = {"chess": (1e-5, 1e-6), "images": (0.15, 0.03), "images_tfrecord": (0.15, 0.03),
             "overhead": (0, 0),
             "python_heavy": (0, 0), "shuffle_memory": (0, 0)}
# Tolerance of the epoch digest (a float64 sum in whatever order a system chose): relative to
# the sum, plus the mean difference per summed value allowed by TOLERANCE.
DIGEST_RTOL = {"chess": 1e-7, "images": 1e-7, "images_tfrecord": 1e-7, "overhead": 0,
               "python_heavy": 0,
               "shuffle_memory": 0}


def _chess_rows(data: dict[str, Any], start: int, stop: int) -> dict[str, np.ndarray]:
    d = np.load(data["d"], mmap_mode="r")[start:stop]
    s = np.load(data["s"], mmap_mode="r")[start:stop]
    return common.chess_transform(np.ascontiguousarray(d), np.asarray(s))


def _image_rows(data: dict[str, Any], start: int, stop: int) -> np.ndarray:
    params = np.load(data["params"])
    paths = ([str(image_path(data["image_dir"], i)) for i in range(start, stop)]
             if "image_dir" in data else data["files"][start:stop])
    return np.stack([common.load_and_augment(path, *params[i], data["decoder"])
                     for path, i in zip(paths, range(start, stop), strict=True)])


def _image_record_rows(data: dict[str, Any], start: int, stop: int) -> dict[str, np.ndarray]:
    """images_tfrecord: record ``i`` is image ``i`` (files in order) with its label."""
    return {"image": _image_rows(data, start, stop),
            "label": np.array([common.image_label(i) for i in range(start, stop)], np.int64)}


def _overhead_values(data: dict[str, Any]) -> np.ndarray:
    values = np.arange(data["count"], dtype=np.int64) + 1
    return values[values % 2 == 0]


def batches(workload: str, data: dict[str, Any], limit: int | None = None) -> Iterator[Any]:
    """The expected batches in canonical order (files in order, no shuffle), ``limit`` of them."""
    size = BATCH[workload]
    if workload == "overhead":
        values = _overhead_values(data)
        total = len(values)
    elif workload == "python_heavy":
        lines = read_lines(data)
        total = len(lines)
    else:
        total = data["count"]
    for produced, start in enumerate(range(0, total, size)):
        if limit is not None and produced >= limit:
            return
        stop = min(total, start + size)
        if workload == "chess":
            yield _chess_rows(data, start, stop)
        elif workload == "images":
            yield _image_rows(data, start, stop)
        elif workload == "images_tfrecord":
            yield _image_record_rows(data, start, stop)
        elif workload == "overhead":
            yield values[start:stop]
        elif workload == "python_heavy":
            yield np.stack([common.tokenize(line) for line in lines[start:stop]])
        elif workload == "shuffle_memory":
            yield common.shuffle_element(start, data["element_bytes"])[None]


def first_batches(workload: str, data: dict[str, Any], count: int) -> list[list[np.ndarray]]:
    """The leaves of the first ``count`` expected batches."""
    return [common.batch_leaves(b) for b in batches(workload, data, count)]


def epoch_expectation(workload: str, data: dict[str, Any], cache: Path) -> dict[str, Any]:
    """``{"count": elements, "digest": sum of batch_digest}`` of one epoch (cached on disk)."""
    key = json.dumps({k: v for k, v in sorted(data.items()) if k != "files"}, sort_keys=True)
    path = cache / "reference.json"
    known = common.read_json(path) if path.is_file() else {}
    entry = known.get(workload, {}).get(key)
    if entry is not None:
        return entry
    count, digest = 0, 0.0
    if workload == "shuffle_memory":
        # Each element is constant, so its digest has a closed form: no 2 GiB to generate.
        n, nbytes = data["count"], data["element_bytes"]
        sampled = len(range(0, nbytes, max(1, nbytes // 64)))
        count, values = n, n * sampled
        digest = float(sum((i % 251) * sampled for i in range(n)))
    else:
        values = 0
        for batch in batches(workload, data):
            count += common.batch_size_of(batch)
            digest += common.batch_digest(batch)
            values += common.digest_values(batch)
    entry = {"count": count, "digest": digest, "values": values}
    known.setdefault(workload, {})[key] = entry
    cache.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        json.dump(known, f, indent=1)
    return entry


def compare_batches(workload: str, expected: list[list[np.ndarray]],
                    found: list[list[np.ndarray]]) -> str | None:
    """``None`` if ``found`` matches ``expected``; else what differs, in one sentence."""
    if len(found) < len(expected):
        return f"produced {len(found)} batches, expected at least {len(expected)}"
    tol, mean_tol = TOLERANCE[workload]
    for b, (want, got) in enumerate(zip(expected, found, strict=False)):
        if len(want) != len(got):
            return f"batch {b} has {len(got)} leaves, expected {len(want)}"
        for j, (w, g) in enumerate(zip(want, got, strict=True)):
            if w.shape != g.shape:
                return f"batch {b} leaf {j} has shape {g.shape}, expected {w.shape}"
            if tol == 0:
                if not np.array_equal(w, g):
                    bad = int(np.count_nonzero(w != g))
                    return f"batch {b} leaf {j}: {bad} values differ from the reference"
            else:
                diff = np.abs(w.astype(np.float64) - g.astype(np.float64))
                if not np.all(diff <= tol) or diff.mean() > mean_tol:
                    return (f"batch {b} leaf {j}: max difference {diff.max():.3g}, mean "
                            f"{diff.mean():.3g} (tolerance {tol}, mean {mean_tol})")
    return None


def compare_epoch(workload: str, expected: dict[str, Any], count: int,
                  digest: float) -> str | None:
    """``None`` if a timed epoch produced the expected elements; else what differs."""
    if count != expected["count"]:
        return f"epoch produced {count} elements, expected {expected['count']}"
    want = expected["digest"]
    allowed = DIGEST_RTOL[workload] * abs(want) + TOLERANCE[workload][1] * expected["values"]
    if abs(digest - want) > allowed:
        return f"epoch digest {digest!r} differs from the reference {want!r}"
    return None
