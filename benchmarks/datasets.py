"""Reading the data people already have: feedline's readers against each format's own loader.

``python -m benchmarks.datasets [--small] [--rounds 3] [--only tfds,array_record,...]
[--max-seconds 60] [--json PATH] [--write]``

Side by side in one run, each system in its own process (its own virtual environment,
``benchmarks/envs.py``), one process per (data set, system, round) that reads every variant
of that data set once, rounds in the order A B C, B C A, … (the page cache warmed first):

- **tfds**: a TFDS directory written by tensorflow-datasets (``benchmarks/datasets_data.py``:
  CIFAR-10's shape, 32x32 PNG images, ``ClassLabel``, an id and a 16-float ``Tensor``, 8
  TFRecord shards) read whole, batched by 128: ``fl.datasets.load(...).batch(128)
  .prefetch(AUTOTUNE)`` against ``tfds.as_numpy(tfds.load(...).batch(128)
  .prefetch(AUTOTUNE))`` (TFDS's own parallel interleave and decode; its in-memory
  auto-cache off, which one epoch in a fresh process never reads back). Variants: images
  ``decoded`` (the feature's PNG decoding, as TFDS does by default) and ``encoded``
  (``decoders={"image": SkipDecoding()}``, both sides: the reading and parsing alone).
  Goal: feedline >= 1.5x.
- **array_record**: ArrayRecord files (``group_size:1``, records of about 1 KB), every
  record read once in a random order, by 256: ``global_shuffle`` = each system's pipeline
  (``fl.ArrayRecordDataset(files).global_shuffle(seed).batch(256).prefetch(AUTOTUNE)``
  against Grain's ``MapDataset.source(ArrayRecordDataSource(files)).shuffle(seed)
  .batch(256, batch_fn=list).to_iter_dataset()``); ``same_indices`` = the data sources
  alone reading the same seeded permutation, 256 indices per call
  (``ArrayRecordRandomReader.get_many`` against ``ArrayRecordDataSource.__getitems__``).
  Goal: feedline >= Grain.
- **webdataset**: ``.tar`` shards (64x64 JPEG, class, text per sample), every sample read in
  shard order: ``fl.WebDataset(shards)`` against the ``webdataset`` package's
  ``WebDataset(shards, shardshuffle=False)``; variants ``bytes`` (fields as stored) and
  ``decoded`` (``decode="rgb8"`` against ``.decode("rgb8")``: uint8 pixels and the class as
  an integer). Goal: feedline >= the package.
- **huggingface** (no goal in the issue): a ``save_to_disk`` folder (4 Arrow files) read
  row by row (``fl.HuggingFaceDataset(path)`` against ``datasets.load_from_disk(path)
  .with_format("numpy")``, and its default Python-object rows for reference) and in
  batches of 256 (``.batch(256)`` against ``.with_format("numpy").iter(batch_size=256)``).

Measured per run: elements from building the pipeline to the last element over that time
(imports before the clock), and the CPU seconds of the process and its children. Every run
is checked before its time counts: its element count and an order-free digest of every
element (a 64-bit hash of each element's canonical fields, summed) must equal the expected
values computed from the generated data; decoded JPEG pixels, which decoders round
differently, are compared by the mean of every image, within two grey levels; the PNG
bytes TensorFlow wrote (``tfds`` ``encoded``) are checked by the systems agreeing. The digest
is computed inside the timed loop, the same work for every system (a few percent of a run).
A run cut by ``--max-seconds`` is reported but not checked, so it does not count. A failed
check prints ``!!! WRONG OUTPUT`` and the command exits with status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import datasets_data

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "RESULTS-datasets.md"
WORKLOADS = ("tfds", "array_record", "webdataset", "huggingface")
# Each data set's peer system (its environment in benchmarks/envs.py) and their variants.
PEER = {"tfds": "tf", "array_record": "grain", "webdataset": "webdataset",
        "huggingface": "datasets"}
VARIANTS = {
    ("tfds", "feedline"): ["decoded", "encoded"], ("tfds", "tf"): ["decoded", "encoded"],
    ("array_record", "feedline"): ["global_shuffle", "same_indices"],
    ("array_record", "grain"): ["global_shuffle", "same_indices"],
    ("webdataset", "feedline"): ["bytes", "decoded"],
    ("webdataset", "webdataset"): ["bytes", "decoded"],
    ("huggingface", "feedline"): ["rows", "batches"],
    ("huggingface", "datasets"): ["rows", "rows_python", "batches"],
}
# Table rows: (data set, what is read, feedline's variant, peer's variant, goal ratio).
COMPARISONS = [
    ("tfds", "PNG images decoded, batch 128", "decoded", "decoded", 1.5),
    ("tfds", "images left encoded, batch 128", "encoded", "encoded", 1.5),
    ("array_record", "global shuffle pipeline, batch 256", "global_shuffle",
     "global_shuffle", 1.0),
    ("array_record", "data source, same random indices, 256 a call", "same_indices",
     "same_indices", 1.0),
    ("webdataset", "samples as bytes", "bytes", "bytes", 1.0),
    ("webdataset", "samples decoded (RGB, class)", "decoded", "decoded", 1.0),
    ("huggingface", "rows (peer: numpy format)", "rows", "rows", None),
    ("huggingface", "rows (peer: Python objects)", "rows", "rows_python", None),
    ("huggingface", "batches of 256 (numpy)", "batches", "batches", None),
]
PEER_LABEL = {"tf": "tfds + tf.data", "grain": "Grain", "webdataset": "webdataset",
              "datasets": "HF datasets"}
TFDS_BATCH = 128
BATCH = 256
# Grey levels, on the mean of every image's mean: feedline decodes JPEG as TensorFlow does
# (bit for bit), the webdataset package with Pillow; on these images the two differ by 0.8
# on average (measured), up to 5 on single pixels (chroma upsampling).
PIXEL_TOLERANCE = 2.0
ROWS_PER_FLUSH = 512


# ------------------------------------------------------------------------------ digest
def _np() -> Any:
    import numpy as np

    return np


def _mix(x: Any) -> Any:
    """MurmurHash3's 64-bit finalizer on a uint64 array (wrapping arithmetic)."""
    np = _np()
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xFF51AFD7ED558CCD)
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xC4CEB9FE1A85EC53)
    return x ^ (x >> np.uint64(33))


_WEIGHTS: dict[int, Any] = {}


def _weights(words: int) -> Any:
    """Odd 64-bit multipliers, one per 8-byte word (arithmetic, so every NumPy agrees)."""
    np = _np()
    if words not in _WEIGHTS:
        steps = np.arange(1, words + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        _WEIGHTS[words] = _mix(steps) | np.uint64(1)
    return _WEIGHTS[words]


def _numeric_hashes(values: Any) -> Any:
    """A uint64 per row of a numeric array (its bytes and their count)."""
    np = _np()
    rows = np.ascontiguousarray(values)
    count = rows.shape[0]
    data = rows.reshape(count, -1).view(np.uint8) if rows.size else np.zeros((count, 0),
                                                                              np.uint8)
    width = data.shape[1]
    if width % 8:
        data = np.concatenate([data, np.zeros((count, -width % 8), np.uint8)], axis=1)
    words = data.view("<u8")
    with np.errstate(over="ignore"):
        return (words * _weights(words.shape[1])).sum(axis=1, dtype=np.uint64) + \
            np.uint64(width)


def _bytes_hashes(values: Iterable[Any]) -> Any:
    np = _np()
    out = [(zlib.crc32(v) << 32) | (len(v) & 0xFFFFFFFF) for v in values]
    return np.array(out, dtype=np.uint64)


def _is_numeric(values: Any) -> bool:
    np = _np()
    return isinstance(values, np.ndarray) and values.dtype.kind in "biuf"


class Digest:
    """An order-free digest of elements: count, and the sum (mod 2**64) of a 64-bit hash of
    each element's fields (numeric arrays by their bytes, ``bytes`` by CRC-32 and length).

    ``tolerant`` fields (decoded JPEG pixels) enter the hash by their shape only; the mean
    of each one's values is summed apart, to be compared within a tolerance.

    Example:
        >>> import numpy as np
        >>> a, b = Digest(), Digest()
        >>> _ = a.add_columns({"x": np.arange(4), "s": [b"p", b"q", b"r", b"s"]})
        >>> for i in (3, 1, 0, 2):
        ...     b.add_row({"x": np.int64(i), "s": b"pqrs"[i:i + 1]})
        >>> a.result() == b.result(), a.result()["count"]
        (True, 4)
    """

    def __init__(self, tolerant: frozenset[str] = frozenset()) -> None:
        self.tolerant = tolerant
        self.count = 0
        self.total = 0
        self.means = 0.0
        self._rows: list[dict[str, Any]] = []

    def add_columns(self, columns: dict[str, Any]) -> int:
        """Add a batch: each column a numeric array ``(batch, ...)`` or a sequence of
        ``bytes``; returns the batch's size."""
        np = _np()
        count = -1
        acc: Any = None
        for name in sorted(columns):
            values = columns[name]
            if name in self.tolerant:
                arrays = [np.asarray(v) for v in values]
                self.means += float(sum(a.mean(dtype=np.float64) for a in arrays))
                hashes = _numeric_hashes(np.array([a.shape for a in arrays], np.int64))
            elif _is_numeric(values):
                hashes = _numeric_hashes(values)
            else:
                hashes = _bytes_hashes(values)
            if count not in (-1, len(hashes)):
                raise ValueError(f"column {name!r} has {len(hashes)} rows, others {count}")
            count = len(hashes)
            salt = np.uint64(zlib.crc32(name.encode()))
            with np.errstate(over="ignore"):
                mixed = _mix(hashes ^ salt)
                acc = mixed if acc is None else acc + mixed
        if acc is None:
            return 0
        with np.errstate(over="ignore"):
            self.total = (self.total + int(_mix(acc).sum(dtype=np.uint64))) % (1 << 64)
        self.count += count
        return count

    def add_row(self, row: dict[str, Any]) -> None:
        """Add one element (a dict of scalars, arrays and ``bytes``)."""
        self._rows.append(row)
        if len(self._rows) >= ROWS_PER_FLUSH:
            self._flush()

    def _flush(self) -> None:
        np = _np()
        rows, self._rows = self._rows, []
        if not rows:
            return
        columns: dict[str, Any] = {}
        for name in rows[0]:
            values = [row[name] for row in rows]
            if isinstance(values[0], bytes) or name in self.tolerant:
                columns[name] = values
                continue
            arrays = [np.asarray(v) for v in values]
            if len({(a.shape, a.dtype) for a in arrays}) == 1:
                columns[name] = np.stack(arrays)
            else:  # ragged rows: one digest call each, same hash as a stacked row
                for row_part in range(len(rows)):
                    self.add_columns({n: [rows[row_part][n]] if isinstance(
                        rows[row_part][n], bytes) else np.asarray(rows[row_part][n])[None]
                        for n in rows[0]})
                return
        self.add_columns(columns)

    def result(self) -> dict[str, Any]:
        """``{"count", "digest"}`` (and ``"means"`` with tolerant fields)."""
        self._flush()
        out: dict[str, Any] = {"count": self.count, "digest": f"{self.total:016x}"}
        if self.tolerant:
            out["means"] = self.means
        return out


# ----------------------------------------------------------------- canonical elements
def _as_bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def tfds_canonical(example: dict[str, Any]) -> dict[str, Any]:
    """One TFDS example's fields as the digest sees them.

    Example:
        >>> sorted(tfds_canonical(datasets_data.tfds_example(0, 0)))
        ['id', 'image', 'label', 'vector']
    """
    np = _np()
    image = example["image"]
    return {"id": np.int64(example["id"]), "label": np.int64(example["label"]),
            "vector": np.asarray(example["vector"], np.float32),
            "image": _as_bytes(image) if isinstance(image, (bytes, str)) else
            np.asarray(image, np.uint8)}


def tfds_columns(batch: dict[str, Any]) -> dict[str, Any]:
    """A TFDS batch (feedline's or ``tfds.as_numpy``'s) as digest columns."""
    np = _np()
    image = batch["image"]
    return {"id": np.asarray(batch["id"], np.int64),
            "label": np.asarray(batch["label"], np.int64),
            "vector": np.asarray(batch["vector"], np.float32),
            "image": list(image) if getattr(image, "dtype", None) == object else
            np.asarray(image, np.uint8)}


def wds_canonical(sample: dict[str, Any], decoded: bool) -> dict[str, Any]:
    """A WebDataset sample (feedline's, the package's or generated) for the digest: the key
    and the ``jpg``, ``cls`` and ``txt`` fields; decoded, the class as int64.

    Example:
        >>> wds_canonical({"__key__": "k", "__url__": "u", "jpg": b"j", "cls": b"3",
        ...                "txt": "t"}, decoded=False)
        {'__key__': b'k', 'jpg': b'j', 'cls': b'3', 'txt': b't'}
    """
    np = _np()
    return {"__key__": _as_bytes(sample["__key__"]),
            "jpg": np.asarray(sample["jpg"], np.uint8) if decoded else sample["jpg"],
            "cls": np.int64(int(sample["cls"])) if decoded else _as_bytes(sample["cls"]),
            "txt": _as_bytes(sample["txt"])}


def hf_canonical(row: dict[str, Any]) -> dict[str, Any]:
    """A Hugging Face row (feedline's, ``datasets``' numpy or Python rows, or generated).

    Example:
        >>> hf_canonical({"id": 1, "text": "a", "label": 2, "vector": [0.5]})["vector"]
        array([0.5], dtype=float32)
    """
    np = _np()
    return {"id": np.int64(row["id"]), "text": _as_bytes(row["text"]),
            "label": np.int64(row["label"]), "vector": np.asarray(row["vector"], np.float32)}


def hf_columns(batch: dict[str, Any]) -> dict[str, Any]:
    np = _np()
    return {"id": np.asarray(batch["id"], np.int64),
            "text": [_as_bytes(t) for t in batch["text"]],
            "label": np.asarray(batch["label"], np.int64),
            "vector": np.asarray(batch["vector"], np.float32)}


# ------------------------------------------------------------------- each system's reads
Plan = tuple[Callable[[], Iterable[Any]], Callable[[Any, Digest], int]]


def _rows(canonical: Callable[[Any], dict[str, Any]]) -> Callable[[Any, Digest], int]:
    def consume(row: Any, digest: Digest) -> int:
        digest.add_row(canonical(row))
        return 1
    return consume


def _columns(columns: Callable[[Any], dict[str, Any]]) -> Callable[[Any, Digest], int]:
    return lambda batch, digest: digest.add_columns(columns(batch))


def _index_batches(meta: dict[str, Any]) -> list[Any]:
    np = _np()
    indices = np.load(meta["indices"])
    return [indices[k:k + BATCH].tolist() for k in range(0, len(indices), BATCH)]


def plan_feedline(workload: str, variant: str, meta: dict[str, Any], seed: int) -> Plan:
    import feedline as fl

    if workload == "tfds":
        def tfds_make() -> Any:
            decoders = {"image": fl.datasets.SkipDecoding()} if variant == "encoded" else None
            return fl.datasets.load(meta["name"], split="train", data_dir=meta["data_dir"],
                                    decoders=decoders).batch(TFDS_BATCH).prefetch(fl.AUTOTUNE)
        return tfds_make, _columns(tfds_columns)
    if workload == "array_record":
        if variant == "global_shuffle":
            def shuffled() -> Any:
                return fl.ArrayRecordDataset(meta["files"]).global_shuffle(seed=seed).batch(
                    BATCH).prefetch(fl.AUTOTUNE)
            return shuffled, _columns(lambda batch: {"record": list(batch)})
        from feedline.formats.array_record import ArrayRecordRandomReader

        batches = _index_batches(meta)

        def same_indices() -> Any:
            with ArrayRecordRandomReader(meta["files"]) as reader:
                for chunk in batches:
                    yield reader.get_many(chunk)
        return same_indices, _columns(lambda batch: {"record": batch})
    if workload == "webdataset":
        decoded = variant == "decoded"
        return (lambda: fl.WebDataset(meta["files"], decode="rgb8" if decoded else None),
                _rows(lambda s: wds_canonical(s, decoded)))
    if variant == "batches":
        return (lambda: fl.HuggingFaceDataset(meta["path"]).batch(BATCH),
                _columns(hf_columns))
    return lambda: fl.HuggingFaceDataset(meta["path"]), _rows(hf_canonical)


def plan_tf(workload: str, variant: str, meta: dict[str, Any], seed: int) -> Plan:
    import tensorflow as tf
    import tensorflow_datasets as tfds

    def make() -> Any:
        decoders = {"image": tfds.decode.SkipDecoding()} if variant == "encoded" else None
        ds = tfds.load(meta["name"], split="train", data_dir=meta["data_dir"],
                       decoders=decoders, download=False,
                       read_config=tfds.ReadConfig(try_autocache=False))
        return tfds.as_numpy(ds.batch(TFDS_BATCH).prefetch(tf.data.AUTOTUNE))
    return make, _columns(tfds_columns)


def plan_grain(workload: str, variant: str, meta: dict[str, Any], seed: int) -> Plan:
    import grain

    if variant == "global_shuffle":
        def make() -> Any:
            source = grain.sources.ArrayRecordDataSource(meta["files"])
            return grain.MapDataset.source(source).shuffle(seed=seed).batch(
                BATCH, batch_fn=list).to_iter_dataset()
        return make, _columns(lambda batch: {"record": batch})
    batches = _index_batches(meta)

    def same_indices() -> Any:
        source = grain.sources.ArrayRecordDataSource(meta["files"])
        for chunk in batches:
            yield source.__getitems__(chunk)
    return same_indices, _columns(lambda batch: {"record": batch})


def plan_webdataset(workload: str, variant: str, meta: dict[str, Any], seed: int) -> Plan:
    import webdataset as wds

    decoded = variant == "decoded"

    def make() -> Any:
        ds = wds.WebDataset(meta["files"], shardshuffle=False)
        return ds.decode("rgb8") if decoded else ds
    return make, _rows(lambda s: wds_canonical(s, decoded))


def plan_datasets(workload: str, variant: str, meta: dict[str, Any], seed: int) -> Plan:
    import datasets

    datasets.disable_progress_bars()
    if variant == "batches":
        return (lambda: datasets.load_from_disk(meta["path"]).with_format("numpy").iter(
            batch_size=BATCH), _columns(hf_columns))
    if variant == "rows":
        return (lambda: datasets.load_from_disk(meta["path"]).with_format("numpy"),
                _rows(hf_canonical))
    return lambda: datasets.load_from_disk(meta["path"]), _rows(hf_canonical)


PLANS = {"feedline": plan_feedline, "tf": plan_tf, "grain": plan_grain,
         "webdataset": plan_webdataset, "datasets": plan_datasets}


# ------------------------------------------------------------------------- one process
def cpu_seconds() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


def tolerant_fields(workload: str, variant: str) -> frozenset[str]:
    """Fields compared within a tolerance (JPEG pixels: decoders round differently)."""
    return frozenset({"jpg"}) if (workload, variant) == ("webdataset", "decoded") else \
        frozenset()


def measure(make: Callable[[], Iterable[Any]], consume: Callable[[Any, Digest], int],
            tolerant: frozenset[str], max_seconds: float) -> dict[str, Any]:
    """One pass: elements/s from building the pipeline to the last element, CPU seconds,
    and the count and digest of what was read (``capped`` if cut by ``max_seconds``)."""
    digest = Digest(tolerant)
    cpu = cpu_seconds()
    started = time.perf_counter()
    iterator = iter(make())
    first = None
    capped = False
    try:
        for unit in iterator:
            consume(unit, digest)
            if first is None:
                first = time.perf_counter() - started
            if max_seconds and time.perf_counter() - started > max_seconds:
                capped = True
                break
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
    result = digest.result()
    seconds = time.perf_counter() - started
    return {"elements": result["count"], "seconds": seconds,
            "rate": result["count"] / seconds if seconds else 0.0,
            "cpu_s": cpu_seconds() - cpu, "first_s": first, "capped": capped,
            "digest": result}


def worker(task: dict[str, Any]) -> list[dict[str, Any]]:
    """Every variant of one (data set, system), in this process."""
    workload, system = task["workload"], task["system"]
    out = []
    for variant in task["variants"]:
        try:
            make, consume = PLANS[system](workload, variant, task["meta"], task["seed"])
            record = measure(make, consume, tolerant_fields(workload, variant),
                             task["max_seconds"])
            record.update(ok=True)
        except Exception:  # noqa: BLE001 - the failure is the result, with its traceback
            record = {"ok": False, "error": traceback.format_exc()[-3000:]}
        record.update(workload=workload, system=system, variant=variant)
        out.append(record)
    return out


# ------------------------------------------------------------------------------ harness
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.datasets",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--small", action="store_true", help="about a tenth of the data")
    parser.add_argument("--tiny", action="store_true",
                        help="a few dozen elements each: tests the harness, measures nothing")
    parser.add_argument("--cache", type=Path, default=datasets_data.CACHE,
                        help="where the data is generated (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3; medians)")
    parser.add_argument("--only", default=",".join(WORKLOADS),
                        help="comma-separated data sets (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--max-seconds", type=float, default=60.0,
                        help="cut a pass after this many seconds (reported, not checked; "
                             "0: never)")
    parser.add_argument("--json", help="also write the results (and the table) as JSON")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    parser.add_argument("--worker", nargs=2, metavar=("TASK", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.only = [w.strip().replace("-", "_") for w in args.only.split(",") if w.strip()]
    unknown = sorted(set(args.only) - set(WORKLOADS))
    if unknown or not args.only:
        parser.error(f"--only takes some of {', '.join(WORKLOADS)}; got {unknown or 'none'}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.max_seconds < 0:
        parser.error("--max-seconds must be 0 (no cap) or positive")
    return args


def environments(workloads: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
    """``system -> (python, why unavailable)`` for feedline and each workload's peer."""
    from benchmarks import envs

    out: dict[str, tuple[str | None, str | None]] = {"feedline": (sys.executable, None)}
    for workload in workloads:
        env = envs.ensure(PEER[workload])
        out[PEER[workload]] = (env.python, env.error)
    return out


def warm(meta: dict[str, Any]) -> None:
    """Read the data once, so that every round reads from the page cache."""
    paths = [Path(p) for p in meta.get("files", [])]
    for folder in ("data_dir", "path"):
        if folder in meta:
            paths += [p for p in Path(meta[folder]).rglob("*") if p.is_file()]
    for path in paths:
        with open(path, "rb") as file:
            while file.read(1 << 24):
                pass


def run_worker(python: str, task: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
    """``task`` in a fresh process of ``python``; failures become failed records."""
    fd, task_path = tempfile.mkstemp(suffix=".json", prefix="dsbench-task-")
    os.close(fd)
    out_path = task_path.replace("-task-", "-out-")
    Path(task_path).write_text(json.dumps(task))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
           "HF_DATASETS_OFFLINE": "1", "TFDS_DISABLE_GCS": "1"}
    problem = None
    try:
        done = subprocess.run([python, "-m", "benchmarks.datasets", "--worker", task_path,
                               out_path], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if done.returncode:
            problem = f"exit status {done.returncode}: {done.stderr.strip()[-1500:]}"
        else:
            return json.loads(Path(out_path).read_text())
    except subprocess.TimeoutExpired:
        problem = f"no result after {timeout:.0f} s"
    finally:
        Path(task_path).unlink(missing_ok=True)
        Path(out_path).unlink(missing_ok=True)
    return [{"ok": False, "error": problem, "workload": task["workload"],
             "system": task["system"], "variant": v} for v in task["variants"]]


def check(record: dict[str, Any], expected: dict[str, Any] | None, count: int) -> str:
    """``"ok"``, or why ``record``'s output does not count (``expected`` ``None``: checked
    later against the other systems)."""
    if not record.get("ok"):
        return "failed: " + record.get("error", "?").strip().splitlines()[-1][:200]
    if record["capped"]:
        return f"capped at {record['elements']:,} of {count:,}: not checked"
    got = record["digest"]
    if got["count"] != count:
        return f"WRONG OUTPUT: {got['count']:,} elements, expected {count:,}"
    if expected is None:
        return "ok"
    if got["digest"] != expected["digest"]:
        return f"WRONG OUTPUT: digest {got['digest']}, expected {expected['digest']}"
    if "means" in expected:
        off = abs(got["means"] - expected["means"]) / max(count, 1)
        if off > PIXEL_TOLERANCE:
            return (f"WRONG OUTPUT: pixel means differ by {off:.3f} grey levels per image "
                    f"(tolerance {PIXEL_TOLERANCE})")
    return "ok"


def agree(records: list[dict[str, Any]]) -> None:
    """Where no reference exists (TFDS's PNG bytes), checked runs must agree."""
    checked = [r for r in records if r.get("status") == "ok"]
    if len({r["digest"]["digest"] for r in checked}) > 1:
        for r in checked:
            r["status"] = "WRONG OUTPUT: the systems' digests differ"


def _expected(meta: dict[str, Any], workload: str, variant: str) -> dict[str, Any] | None:
    expected = meta["expected"]
    if workload in ("tfds", "webdataset"):
        return expected[variant]
    return expected


def summarize(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Median and range of the checked runs' rates and CPU per 1,000 elements."""
    good = [r for r in records if r.get("status") == "ok"]
    if not good:
        return None
    rates = [r["rate"] for r in good]
    return {"rate": statistics.median(rates), "low": min(rates), "high": max(rates),
            "cpu_ms_per_1k": statistics.median(1e6 * r["cpu_s"] / r["elements"]
                                               for r in good),
            "runs": len(good)}


def _problem(records: list[dict[str, Any]], unavailable: str | None) -> str:
    if unavailable:
        return f"unavailable: {unavailable}"
    bad = [r.get("status", "not run") for r in records if r.get("status") != "ok"]
    return bad[0] if bad else "not run"


def markdown(rows: list[dict[str, Any]], rounds: int) -> str:
    lines = [f"Elements/s, median of {rounds} round(s) (min–max); CPU ms per 1,000 elements "
             "(process and children). Ratio = feedline / peer.", "",
             "| data | reading | feedline | peer | peer el/s | feedline / peer | goal |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        ours, theirs = row["feedline"], row["peer"]

        def cell(s: dict[str, Any] | None, problem: str) -> str:
            if s is None:
                return problem
            return (f"{s['rate']:,.0f} ({s['low']:,.0f}–{s['high']:,.0f}); "
                    f"{s['cpu_ms_per_1k']:,.0f} CPU ms")
        ratio = "–"
        goal = "–" if row["goal"] is None else f"≥ {row['goal']:g}x"
        if ours is not None and theirs is not None:
            value = ours["rate"] / theirs["rate"]
            ratio = f"**{value:.2f}x**"
            if row["goal"] is not None:
                goal += " met" if value >= row["goal"] else " **not met**"
        lines.append(f"| {row['workload']} | {row['label']} | "
                     f"{cell(ours, row['feedline_problem'])} | {row['peer_label']} | "
                     f"{cell(theirs, row['peer_problem'])} | {ratio} | {goal} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        task = json.loads(Path(args.worker[0]).read_text())
        Path(args.worker[1]).write_text(json.dumps(worker(task)))
        return 0
    sizes = (datasets_data.Sizes.tiny() if args.tiny else datasets_data.Sizes.small()
             if args.small else datasets_data.Sizes())
    started = time.perf_counter()
    pythons = environments(args.only)
    metas: dict[str, dict[str, Any]] = {}
    data_problem: dict[str, str] = {}
    for workload in args.only:
        try:
            print(f"[datasets] data: {workload} ...", file=sys.stderr, flush=True)
            metas[workload] = datasets_data.generate(workload, sizes, args.seed, args.cache)
            warm(metas[workload])
        except Exception as error:  # noqa: BLE001 - reported in the table
            data_problem[workload] = f"no data: {str(error)[-300:]}"
            print(f"[datasets] {workload}: {data_problem[workload]}", file=sys.stderr)
    records: list[dict[str, Any]] = []
    for round_index in range(args.rounds):
        for workload in args.only:
            if workload not in metas:
                continue
            systems = ["feedline", PEER[workload]]
            systems = systems[round_index % 2:] + systems[:round_index % 2]
            for system in systems:
                python, unavailable = pythons[system]
                if python is None:
                    continue
                variants = VARIANTS[(workload, system)]
                task = {"workload": workload, "system": system, "variants": variants,
                        "meta": metas[workload], "seed": args.seed,
                        "max_seconds": args.max_seconds}
                timeout = (args.max_seconds or 1800) * len(variants) + 180
                for record in run_worker(python, task, timeout):
                    expected = _expected(metas[workload], workload, record["variant"])
                    record["round"] = round_index + 1
                    record["status"] = check(record, expected, metas[workload]["count"])
                    if record["status"] != "ok":
                        print(f"!!! {workload} {system} {record['variant']} round "
                              f"{round_index + 1}: {record['status']}", file=sys.stderr)
                    records.append(record)
    for workload in args.only:
        if workload in metas:
            for variant in {v for (w, _), vs in VARIANTS.items() if w == workload for v in vs}:
                if _expected(metas[workload], workload, variant) is None:
                    agree([r for r in records if (r["workload"], r["variant"]) ==
                           (workload, variant)])
    rows = []
    for workload, label, ours, theirs, goal in COMPARISONS:
        if workload not in args.only:
            continue
        peer = PEER[workload]
        mine = [r for r in records if (r["workload"], r["system"], r["variant"]) ==
                (workload, "feedline", ours)]
        other = [r for r in records if (r["workload"], r["system"], r["variant"]) ==
                 (workload, peer, theirs)]
        rows.append({"workload": workload, "label": label, "goal": goal,
                     "peer_label": PEER_LABEL[peer], "feedline": summarize(mine),
                     "peer": summarize(other),
                     "feedline_problem": data_problem.get(workload) or _problem(mine, None),
                     "peer_problem": data_problem.get(workload) or _problem(
                         other, pythons.get(peer, (None, None))[1])})
    failed = [r for r in records if r["status"].startswith("WRONG") or
              r["status"].startswith("failed")]
    table = markdown(rows, args.rounds)
    counts = ", ".join(f"{w}: {m['count']:,}" for w, m in metas.items())
    size = "--tiny" if args.tiny else "--small" if args.small else "default sizes"
    text = (f"Data ({size}; elements): {counts}.\n\n"
            f"{table}\n\nChecked runs: {sum(r['status'] == 'ok' for r in records)} of "
            f"{len(records)}; {len(failed)} wrong or failed. Took "
            f"{time.perf_counter() - started:,.0f} s.")
    if failed:
        text += "\n\n!!! CORRECTNESS CHECK FAILED (or a run failed): see the rows above."
    from benchmarks.common import emit

    emit({"records": records, "rows": rows, "sizes": vars(sizes), "ok": not failed},
         text, args.json)
    if args.write:
        command = "python -m benchmarks.datasets" + (" --small" if args.small else "") + \
            f" --rounds {args.rounds}"
        RESULTS.write_text(
            "# Reading TFDS directories, ArrayRecord, WebDataset and Hugging Face data\n\n"
            f"`{command}` on {platform.machine()}, {os.cpu_count()} CPUs, "
            f"{time.strftime('%Y-%m-%d')}.\n\n{text}\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
