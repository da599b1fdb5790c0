"""Generate each workload's data once into ``benchmarks/.cache`` and describe it for the workers.

Each data set lives in a folder named after its parameters (kind, size, seed), holds a
``meta.json`` written last (a folder without one is an interrupted generation and is made
again), and is reused by every later run with the same parameters.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common

CACHE = Path(__file__).resolve().parent / ".cache"


@dataclass(frozen=True)
class Sizes:
    """Data sizes of one run (``--small`` and the per-workload options set them).

    Attributes:
        chess_records: Records of the chess workload.
        chess_files: TFRecord files they are split into.
        images: JPEG files of the images workload (and records of images_tfrecord).
        image_record_files: TFRecord files the images_tfrecord workload's records fill.
        overhead_range: ``range(n)`` of the overhead workload.
        text_lines: Lines of the python-heavy workload.
        shuffle_buffer_mib: Shuffle buffer of the shuffle-memory workload, in 1 MiB elements.
        shuffle_data_mib: Elements flowing through that buffer.
    """

    chess_records: int = 400_000
    chess_files: int = 8
    images: int = 2_000
    image_record_files: int = 8
    overhead_range: int = 2_000_000
    text_lines: int = 40_000
    shuffle_buffer_mib: int = 1024
    shuffle_data_mib: int = 2048

    @classmethod
    def small(cls) -> Sizes:
        """About a tenth of the default: a quick run that still exercises every path."""
        return cls(chess_records=40_000, chess_files=8, images=200, overhead_range=200_000,
                   text_lines=4_000, shuffle_buffer_mib=64, shuffle_data_mib=128)


def _progress(total: int, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="it", leave=False, mininterval=0.5)


def _finish(folder: Path, meta: dict[str, Any]) -> dict[str, Any]:
    with open(folder / "meta.json", "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def _fresh(folder: Path) -> dict[str, Any] | None:
    """The folder's metadata if a complete generation is there; else an empty folder."""
    if (folder / "meta.json").is_file():
        return common.read_json(folder / "meta.json")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return None


def chess(records: int, files: int, seed: int, cache: Path = CACHE) -> dict[str, Any]:
    """``records`` chess Examples in ``files`` TFRecord files, and their features as ``.npy``.

    ``d.npy``/``s.npy`` hold the features in the canonical order (file after file), from
    which the harness computes the expected output without parsing anything.
    """
    folder = cache / f"chess-{records}-{files}-s{seed}"
    meta = _fresh(folder)
    if meta is not None:
        return meta
    rng = np.random.default_rng(seed)
    d = rng.integers(0, 256, size=(records, common.CHESS_RECORD_BYTES), dtype=np.uint8)
    s = rng.integers(-3000, 3000, size=records, dtype=np.int64)
    np.save(folder / "d.npy", d)
    np.save(folder / "s.npy", s)
    bounds = np.linspace(0, records, files + 1).astype(int)
    paths = []
    with _progress(records, "chess records") as bar:
        for i in range(files):
            path = folder / f"part-{i:05d}-of-{files:05d}.tfrecord"
            with open(path, "wb") as f:
                f.writelines(common.frame_record(common.encode_chess_example(
                    d[j].tobytes(), int(s[j]))) for j in range(bounds[i], bounds[i + 1]))
                bar.update(bounds[i + 1] - bounds[i])
            paths.append(str(path))
    return _finish(folder, {"kind": "chess", "files": paths, "count": records,
                            "d": str(folder / "d.npy"), "s": str(folder / "s.npy")})


def available_decoder() -> str:
    """The JPEG decoder every system uses: simplejpeg when importable, else Pillow."""
    try:
        import simplejpeg  # noqa: F401

        return "simplejpeg"
    except ImportError:
        return "pillow"


_AXIS = np.arange(common.IMAGE_SIZE, dtype=np.float32)


def _synthetic_image(rng: np.random.Generator) -> np.ndarray:
    # Smooth colour fields, waves and sensor-like noise: JPEG sizes close to real photos
    # (tens of KB), unlike flat colours (tiny) or pure noise (huge).
    low = rng.integers(0, 256, size=(20, 20, 3)).astype(np.int16)
    big = np.repeat(np.repeat(low, 16, axis=0), 16, axis=1)
    wave = (40 * np.cos(_AXIS / rng.uniform(5, 30))[:, None]
            * np.sin(_AXIS / rng.uniform(5, 30))[None, :]).astype(np.int16)
    noisy = big + wave[..., None] + rng.integers(-12, 13, size=big.shape, dtype=np.int16)
    return np.clip(noisy, 0, 255).astype(np.uint8)


def _encode_jpeg(image: np.ndarray) -> bytes:
    try:
        import simplejpeg

        return simplejpeg.encode_jpeg(image, quality=90, colorspace="RGB")
    except ImportError:
        import io

        from PIL import Image

        out = io.BytesIO()
        Image.fromarray(image).save(out, format="JPEG", quality=90)
        return out.getvalue()


def images(count: int, seed: int, cache: Path = CACHE) -> dict[str, Any]:
    """``count`` 320x320 JPEG files and the table of their crop/flip parameters."""
    folder = cache / f"images-v2-{count}-s{seed}"
    meta = _fresh(folder)
    if meta is not None:
        return meta
    rng = np.random.default_rng(seed)
    paths = []
    for i in _iter_progress(range(count), "images"):
        path = image_path(folder, i)
        path.write_bytes(_encode_jpeg(_synthetic_image(rng)))
        paths.append(str(path))
    params = common.augment_params(count, seed)
    np.save(folder / "params.npy", params)
    total = sum(os.path.getsize(p) for p in paths)
    return _finish(folder, {"kind": "images", "files": paths, "count": count,
                            "params": str(folder / "params.npy"), "bytes": total})


def image_path(folder: str | Path, index: int) -> Path:
    """The JPEG file of image ``index`` in an images folder.

    Example:
        >>> image_path("/data", 7).name
        'img-000007.jpg'
    """
    return Path(folder) / f"img-{index:06d}.jpg"


def images_tfrecord(count: int, files: int, seed: int, cache: Path = CACHE) -> dict[str, Any]:
    """The ``count`` JPEGs of :func:`images` as ``tf.train.Example`` records in ``files``
    TFRecord files (image ``i`` is record ``i`` in file order), each with ``image/encoded``,
    ``image/class/label`` (:func:`common.image_label`) and ``image/index`` (its row of the
    crop/flip table, which is the JPEG folder's ``params.npy``)."""
    jpegs = images(count, seed, cache)
    folder = cache / f"images-tfrecord-{count}-{files}-s{seed}"
    meta = _fresh(folder)
    if meta is not None:
        return meta
    image_dir = Path(jpegs["files"][0]).parent
    bounds = np.linspace(0, count, files + 1).astype(int)
    paths = []
    for i in _iter_progress(range(files), "image records"):
        path = folder / f"train-{i:05d}-of-{files:05d}.tfrecord"
        with open(path, "wb") as f:
            for j in range(bounds[i], bounds[i + 1]):
                record = common.encode_image_example(image_path(image_dir, j).read_bytes(),
                                                     common.image_label(j), j)
                f.write(common.frame_record(record))
        paths.append(str(path))
    total = sum(os.path.getsize(p) for p in paths)
    return _finish(folder, {"kind": "images_tfrecord", "files": paths, "count": count,
                            "params": jpegs["params"], "image_dir": str(image_dir),
                            "bytes": total})


def _iter_progress(items: Any, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(items, desc=desc, leave=False, mininterval=0.5)


def text(lines: int, seed: int, cache: Path = CACHE) -> dict[str, Any]:
    """``lines`` lines of 70 random words from a 5 000-word vocabulary, one file."""
    folder = cache / f"text-v3-{lines}-s{seed}"
    meta = _fresh(folder)
    if meta is not None:
        return meta
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    punct = ["", "", "", ",", ".", "!"]
    # Words with their punctuation, drawn all at once (a Python loop per word is slow).
    words = ["".join(letters[rng.integers(0, 26, rng.integers(2, 9))]) for _ in range(5000)]
    vocab = [word + mark for word in words for mark in punct]
    picks = rng.integers(0, len(vocab), size=(lines, 70))
    path = folder / "lines.txt"
    with open(path, "w") as f:
        f.writelines(" ".join([vocab[i] for i in row]).capitalize() + "\n"
                     for row in _iter_progress(picks, "text lines"))
    return _finish(folder, {"kind": "text", "path": str(path), "count": lines})


def read_lines(meta: dict[str, Any]) -> list[str]:
    """The lines of a text data set (without line ends)."""
    with open(meta["path"]) as f:
        return f.read().splitlines()


def describe(workload: str, sizes: Sizes, seed: int, cache: Path = CACHE) -> dict[str, Any]:
    """Generate (if needed) and describe the data of ``workload`` for the workers."""
    if workload == "chess":
        return chess(sizes.chess_records, sizes.chess_files, seed, cache)
    if workload == "images":
        return {**images(sizes.images, seed, cache), "decoder": available_decoder()}
    if workload == "images_tfrecord":
        return {**images_tfrecord(sizes.images, sizes.image_record_files, seed, cache),
                "decoder": available_decoder()}
    if workload == "overhead":
        return {"kind": "range", "count": sizes.overhead_range}
    if workload == "python_heavy":
        return text(sizes.text_lines, seed, cache)
    if workload == "shuffle_memory":
        return {"kind": "shuffle", "count": sizes.shuffle_data_mib,
                "buffer": sizes.shuffle_buffer_mib,
                "element_bytes": common.SHUFFLE_ELEMENT_BYTES}
    raise ValueError(f"unknown workload {workload!r}")


def chess_meta(folder: str | None, small: bool) -> dict[str, Any]:
    """The chess data an extra benchmark runs on: ``folder``'s (``--chess-data``, as
    ``./dev bench`` passes it), else generated into the cache at the chosen size."""
    if folder:
        return json.loads((Path(folder) / "meta.json").read_text())
    sizes = Sizes.small() if small else Sizes()
    return chess(sizes.chess_records, sizes.chess_files, 1234)
