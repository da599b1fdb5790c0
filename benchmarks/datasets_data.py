"""Data of ``python -m benchmarks.datasets``, each written by its own library, with the
expected output of every reader (element count and order-free digest).

- ``tfds``: a TFDS directory (``fl_bench_cifar/1.0.0``) written by tensorflow-datasets
  itself (a ``GeneratorBasedBuilder``, run in the ``tf`` environment): CIFAR-10's shape, a
  32x32x3 PNG ``Image``, a ``ClassLabel`` of 10 classes, an ``int64`` ``id`` and a
  ``Tensor`` of 16 ``float32``; several TFRecord shards. PNG is lossless, so the reference
  digest of decoded examples is computed from the generated pixels.
- ``array_record``: records of about 1 KB (an 8-byte index, then 4-bit symbols, so they
  compress about 2x) in ArrayRecord files written by the array-record package with
  ``group_size:1`` (what Grain recommends for random access), and a seeded permutation of
  every index (``indices.npy``) that both random readers read.
- ``webdataset``: ``.tar`` shards of samples ``<key>.jpg`` (64x64 JPEG, Pillow, quality 90),
  ``<key>.cls`` and ``<key>.txt``, written with :mod:`tarfile` (what ``webdataset.TarWriter``
  uses).
- ``huggingface``: a ``Dataset.save_to_disk`` folder written by Hugging Face ``datasets``
  (run in the ``datasets`` environment): ``id`` int64, ``text`` string, ``label``
  ``ClassLabel(10)``, ``vector`` ``Sequence(float32, length=16)``, in several Arrow files.

Everything is generated once per size and seed into ``benchmarks/.cache/datasets-*``
(``meta.json`` marks a finished part). This module imports only the standard library at
module level: it runs in the peers' environments too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = HERE / ".cache"
TFDS_NAME = "fl_bench_cifar"
TFDS_VERSION = "1.0.0"
WDS_IMAGE = 64
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa"]


@dataclass(frozen=True)
class Sizes:
    """Elements and files of each data set.

    Example:
        >>> Sizes.small().tfds_examples, Sizes.tiny().array_records
        (4000, 200)
    """

    tfds_examples: int = 40_000
    tfds_shards: int = 8
    array_records: int = 200_000
    array_files: int = 8
    wds_samples: int = 20_000
    wds_shards: int = 8
    hf_rows: int = 100_000
    hf_files: int = 4

    @classmethod
    def small(cls) -> Sizes:
        """About a tenth (``--small``)."""
        return cls(4_000, 4, 20_000, 4, 2_000, 4, 10_000, 2)

    @classmethod
    def tiny(cls) -> Sizes:
        """For the harness's own tests."""
        return cls(60, 2, 200, 2, 30, 2, 50, 2)


def folder_of(part: str, sizes: Sizes, seed: int, cache: Path = CACHE) -> Path:
    """Where ``part``'s data of these sizes and seed lives (its sizes in the name)."""
    counts = {"tfds": (sizes.tfds_examples, sizes.tfds_shards),
              "array_record": (sizes.array_records, sizes.array_files),
              "webdataset": (sizes.wds_samples, sizes.wds_shards),
              "huggingface": (sizes.hf_rows, sizes.hf_files)}[part]
    return cache / f"datasets-{part}-{counts[0]}-{counts[1]}-s{seed}"


def _fresh(folder: Path) -> dict[str, Any] | None:
    """The folder's metadata if a complete generation is there; else an empty folder."""
    if (folder / "meta.json").is_file():
        return json.loads((folder / "meta.json").read_text())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return None


def _finish(folder: Path, meta: dict[str, Any]) -> dict[str, Any]:
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


# ------------------------------------------------------------------------ examples
def tfds_example(index: int, seed: int) -> dict[str, Any]:
    """Example ``index`` of the TFDS data: a smooth 32x32 image with fine noise (so PNG
    compresses it as photos compress), its class, its id and 16 floats.

    Example:
        >>> e = tfds_example(3, 0)
        >>> e["image"].shape, e["image"].dtype.name, int(e["label"]), e["vector"].shape
        ((32, 32, 3), 'uint8', 3, (16,))
    """
    import numpy as np

    rng = np.random.default_rng([seed, index])
    raw = np.frombuffer(rng.bytes(8 * 8 * 3 + 32 * 32 * 3 + 16), np.uint8)
    coarse = raw[:192].reshape(8, 8, 3)
    fine = raw[192:192 + 3072].reshape(32, 32, 3)
    image = np.repeat(np.repeat(coarse // 2, 4, axis=0), 4, axis=1) + fine % 16
    return {"id": np.int64(index), "label": np.int64(index % 10),
            "vector": raw[-16:].astype(np.float32) / np.float32(255),
            "image": image.astype(np.uint8)}


def record_bytes(index: int, seed: int) -> bytes:
    """Record ``index`` of the ArrayRecord data: its index, then 900-1100 4-bit symbols.

    Example:
        >>> r = record_bytes(7, 0)
        >>> int.from_bytes(r[:8], "little"), 908 <= len(r) <= 1108
        (7, True)
    """
    import numpy as np

    rng = np.random.default_rng([seed, 1, index])
    size = 900 + int(rng.integers(0, 201))
    return index.to_bytes(8, "little") + (np.frombuffer(rng.bytes(size), np.uint8) & 15
                                          ).tobytes()


def wds_sample(index: int, seed: int) -> dict[str, Any]:
    """Sample ``index`` of the WebDataset shards: its key, a 64x64 JPEG, class and text.

    Example:
        >>> s = wds_sample(2, 0)
        >>> s["__key__"], s["cls"], s["jpg"][:2]
        ('sample-000000002', b'2', b'\\xff\\xd8')
    """
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng([seed, 2, index])
    coarse = np.frombuffer(rng.bytes(8 * 8 * 3), np.uint8).reshape(8, 8, 3)
    picture = Image.fromarray(coarse).resize((WDS_IMAGE, WDS_IMAGE), Image.BILINEAR)
    out = io.BytesIO()
    picture.save(out, format="JPEG", quality=90)
    words = " ".join(WORDS[int(w)] for w in rng.integers(0, len(WORDS), 8))
    return {"__key__": f"sample-{index:09d}", "jpg": out.getvalue(),
            "cls": str(index % 100).encode(), "txt": f"{index}: {words}".encode()}


def hf_row(index: int, seed: int) -> dict[str, Any]:
    """Row ``index`` of the Hugging Face data.

    Example:
        >>> r = hf_row(5, 0)
        >>> int(r["id"]), int(r["label"]), r["text"].split(":")[0], r["vector"].dtype.name
        (5, 5, '5', 'float32')
    """
    import numpy as np

    rng = np.random.default_rng([seed, 3, index])
    raw = np.frombuffer(rng.bytes(16 + 10), np.uint8)
    words = " ".join(WORDS[int(w) % len(WORDS)] for w in raw[16:])
    return {"id": np.int64(index), "text": f"{index}: {words}",
            "label": np.int64(index % 10),
            "vector": raw[:16].astype(np.float32) / np.float32(255)}


# ------------------------------------------------------------------------ references
def reference(rows: Any, canonical: Any, tolerant: frozenset[str] = frozenset()
              ) -> dict[str, Any]:
    """Count and digest of ``rows`` (dicts), each passed through ``canonical`` first."""
    from benchmarks.datasets import Digest

    digest = Digest(tolerant)
    for row in rows:
        digest.add_row(canonical(row))
    return digest.result()


def _split(total: int, parts: int) -> list[tuple[int, int]]:
    bounds = [total * k // parts for k in range(parts + 1)]
    return [(bounds[k], bounds[k + 1]) for k in range(parts)]


# ------------------------------------------------------------------------ writers
def array_record(sizes: Sizes, seed: int, cache: Path = CACHE) -> dict[str, Any]:
    """ArrayRecord files (group_size:1), the permutation read, and the expected digest."""
    import numpy as np
    from array_record.python import array_record_module

    folder = folder_of("array_record", sizes, seed, cache)
    meta = _fresh(folder)
    if meta is not None:
        return meta
    files = []
    for k, (start, stop) in enumerate(_split(sizes.array_records, sizes.array_files)):
        path = folder / f"records-{k:05d}-of-{sizes.array_files:05d}.array_record"
        writer = array_record_module.ArrayRecordWriter(str(path), "group_size:1")
        for index in range(start, stop):
            writer.write(record_bytes(index, seed))
        writer.close()
        files.append(str(path))
    np.save(folder / "indices.npy",
            np.random.default_rng(seed).permutation(sizes.array_records).astype(np.int64))
    expected = reference((record_bytes(i, seed) for i in range(sizes.array_records)),
                         lambda record: {"record": record})
    return _finish(folder, {"files": files, "indices": str(folder / "indices.npy"),
                            "count": sizes.array_records, "expected": expected})


def webdataset(sizes: Sizes, seed: int, cache: Path = CACHE) -> dict[str, Any]:
    """``.tar`` shards and the expected digests of their samples as bytes and decoded (the
    pixels by Pillow: decoders differ by a grey level or two, so pixels are compared by
    their mean within a tolerance)."""
    import io
    import tarfile

    import numpy as np
    from PIL import Image

    from benchmarks.datasets import wds_canonical

    folder = folder_of("webdataset", sizes, seed, cache)
    meta = _fresh(folder)
    if meta is not None:
        return meta
    files = []
    for k, (start, stop) in enumerate(_split(sizes.wds_samples, sizes.wds_shards)):
        path = folder / f"shard-{k:06d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for index in range(start, stop):
                sample = wds_sample(index, seed)
                for field in ("jpg", "cls", "txt"):
                    info = tarfile.TarInfo(f"{sample['__key__']}.{field}")
                    info.size, info.mtime, info.mode = len(sample[field]), 1_700_000_000, 0o644
                    tar.addfile(info, io.BytesIO(sample[field]))
        files.append(str(path))
    samples = [wds_sample(i, seed) for i in range(sizes.wds_samples)]
    as_bytes = reference(samples, lambda s: wds_canonical(s, decoded=False))

    def decoded(sample: dict[str, Any]) -> dict[str, Any]:
        pixels = np.asarray(Image.open(io.BytesIO(sample["jpg"])).convert("RGB"))
        return wds_canonical({**sample, "jpg": pixels, "cls": int(sample["cls"])},
                             decoded=True)

    as_pixels = reference(samples, decoded, frozenset({"jpg"}))
    return _finish(folder, {"files": files, "count": sizes.wds_samples,
                            "expected": {"bytes": as_bytes, "decoded": as_pixels}})


def _peer_python(system: str) -> str | None:
    python = HERE / ".venvs" / system / "bin" / "python"
    return str(python) if python.exists() else None


def _in_peer(system: str, part: str, folder: Path, sizes: Sizes, seed: int) -> None:
    """Run this module's ``part`` writer in ``system``'s environment (its library writes)."""
    python = _peer_python(system)
    if python is None:
        raise RuntimeError(f"no {system} environment under {HERE / '.venvs'}")
    done = subprocess.run(
        [python, "-m", "benchmarks.datasets_data", part, str(folder), json.dumps(vars(sizes)),
         str(seed)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT),
                                    "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode:
        raise RuntimeError(f"writing the {part} data in the {system} environment failed: "
                           f"{done.stderr.strip()[-1500:]}")


def tfds(sizes: Sizes, seed: int, cache: Path = CACHE) -> dict[str, Any]:
    """The TFDS directory (written by tensorflow-datasets in the ``tf`` environment)."""
    folder = folder_of("tfds", sizes, seed, cache)
    meta = _fresh(folder)
    if meta is None:
        _in_peer("tf", "tfds", folder, sizes, seed)
        meta = json.loads((folder / "meta.json").read_text())
    return meta


def huggingface(sizes: Sizes, seed: int, cache: Path = CACHE) -> dict[str, Any]:
    """The ``save_to_disk`` folder (written by ``datasets`` in its environment)."""
    folder = folder_of("huggingface", sizes, seed, cache)
    meta = _fresh(folder)
    if meta is None:
        _in_peer("datasets", "huggingface", folder, sizes, seed)
        meta = json.loads((folder / "meta.json").read_text())
    return meta


def _write_tfds(folder: Path, sizes: Sizes, seed: int) -> None:
    """In the ``tf`` environment: the builder's ``download_and_prepare``."""
    import numpy as np
    import tensorflow_datasets as tfds

    from benchmarks.datasets import tfds_canonical

    features = tfds.features

    class Builder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        """CIFAR-10's shape: a PNG image, a class, plus an id and a float tensor."""

        name = TFDS_NAME
        VERSION = tfds.core.Version(TFDS_VERSION)

        def _info(self) -> Any:
            return tfds.core.DatasetInfo(
                builder=self, description="feedline's datasets benchmark.",
                supervised_keys=("image", "label"),
                features=features.FeaturesDict({
                    "id": np.int64,
                    "image": features.Image(shape=(32, 32, 3), encoding_format="png"),
                    "label": features.ClassLabel(num_classes=10),
                    "vector": features.Tensor(shape=(16,), dtype=np.float32),
                }))

        def _split_generators(self, dl_manager: Any) -> Any:
            return {"train": self._generate_examples()}

        def _generate_examples(self) -> Any:
            for index in range(sizes.tfds_examples):
                yield index, tfds_example(index, seed)

    builder = Builder(data_dir=str(folder))
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        num_shards=sizes.tfds_shards))
    examples = (tfds_example(i, seed) for i in range(sizes.tfds_examples))
    decoded = reference(examples, lambda e: tfds_canonical(e))
    _finish(folder, {"data_dir": str(folder), "name": TFDS_NAME,
                     "count": sizes.tfds_examples, "tfds_version": tfds.__version__,
                     "files": sorted(str(p) for p in folder.rglob("*.tfrecord*")),
                     # The PNG bytes are TensorFlow's encoding: the systems must agree.
                     "expected": {"decoded": decoded, "encoded": None}})


def _write_huggingface(folder: Path, sizes: Sizes, seed: int) -> None:
    """In the ``datasets`` environment: ``Dataset.from_dict(...).save_to_disk``."""
    import datasets
    import numpy as np

    from benchmarks.datasets import hf_canonical

    rows = [hf_row(i, seed) for i in range(sizes.hf_rows)]
    features = datasets.Features({
        "id": datasets.Value("int64"), "text": datasets.Value("string"),
        "label": datasets.ClassLabel(num_classes=10),
        "vector": datasets.Sequence(datasets.Value("float32"), length=16)})
    table = datasets.Dataset.from_dict(
        {"id": [int(r["id"]) for r in rows], "text": [r["text"] for r in rows],
         "label": [int(r["label"]) for r in rows],
         "vector": np.stack([r["vector"] for r in rows])}, features=features)
    path = folder / "saved"
    table.save_to_disk(str(path), num_shards=sizes.hf_files)
    _finish(folder, {"path": str(path), "count": sizes.hf_rows,
                     "files": sorted(str(p) for p in path.glob("*.arrow")),
                     "datasets_version": datasets.__version__,
                     "expected": reference(rows, hf_canonical)})


def generate(part: str, sizes: Sizes, seed: int, cache: Path = CACHE) -> dict[str, Any]:
    """``part``'s data (generated if absent) and its metadata."""
    writer = {"tfds": tfds, "array_record": array_record, "webdataset": webdataset,
              "huggingface": huggingface}[part]
    return writer(sizes, seed, cache)


if __name__ == "__main__":  # run in a peer's environment by _in_peer
    part, where, sizes_json, seed_text = sys.argv[1:5]
    target = {"tfds": _write_tfds, "huggingface": _write_huggingface}[part]
    target(Path(where), Sizes(**json.loads(sizes_json)), int(seed_text))
