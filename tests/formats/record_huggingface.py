"""Write the golden Hugging Face datasets of tests/data/huggingface/ with ``datasets`` itself.

Run once where ``datasets`` is installed (``benchmarks/.venvs/tf/bin/python -m pip install
datasets``; ``benchmarks/.venvs/tf/bin/python tests/formats/record_huggingface.py``); the
files are committed, so the tests need neither ``datasets`` nor TensorFlow.

* ``dict/``: a ``DatasetDict`` saved with ``save_to_disk``: ``train`` in 2 shards
  (``num_shards``), ``test`` in one, every common feature type (Value of several dtypes,
  ClassLabel, Sequence of numbers and of strings, a dict, Image, Array2D, nulls).
* ``single/``: the ``test`` split alone, saved with ``save_to_disk`` (a ``Dataset``).
* ``cache.arrow``: an Arrow cache file (``Dataset.from_dict(...).flatten_indices(
  cache_file_name=...)``), ``cache.parquet``: the same rows from ``Dataset.to_parquet``.

``expected.json`` holds what ``datasets`` gives for every row (``ds[i]``, images as their
``{"bytes", "path"}`` storage, bytes as hex), the features and split sizes, and the pixels
of the images.
"""

import io
import json
import pathlib
import shutil

import numpy as np
from PIL import Image

HERE = pathlib.Path(__file__).resolve().parents[1] / "data" / "huggingface"

def features():
    import datasets  # here: pytest imports this module where it is absent

    return datasets.Features({
        "id": datasets.Value("int64"),
        "score": datasets.Value("float32"),
        "flag": datasets.Value("bool"),
        "small": datasets.Value("int8"),
        "text": datasets.Value("string"),
        "label": datasets.ClassLabel(names=["cat", "dog", "bird"]),
        "vector": datasets.Sequence(datasets.Value("float32")),
        "tokens": datasets.Sequence(datasets.Value("string")),
        "meta": {"source": datasets.Value("string"), "year": datasets.Value("int32")},
        "image": datasets.Image(),
        "grid": datasets.Array2D(shape=(2, 3), dtype="int32"),
        "maybe": datasets.Value("float64"),
    })


def png(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (2 + seed % 3, 3, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def rows(first: int, count: int) -> dict:
    ids = range(first, first + count)
    return {
        "id": list(ids),
        "score": [i / 4 for i in ids],
        "flag": [i % 2 == 0 for i in ids],
        "small": [(-i) % 100 - 50 for i in ids],
        "text": [f"row {i} é" for i in ids],
        "label": [i % 3 for i in ids],
        "vector": [[float(j) for j in range(i % 4)] for i in ids],
        "tokens": [[f"t{j}" for j in range(1 + i % 2)] for i in ids],
        "meta": [{"source": f"s{i}", "year": 2000 + i} for i in ids],
        "image": [{"bytes": png(i), "path": None} for i in ids],
        "grid": [np.arange(6, dtype=np.int32).reshape(2, 3) + i for i in ids],
        "maybe": [None if i % 3 == 0 else i * 1.5 for i in ids],
    }


def plain(value):
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def read_back(ds) -> list:
    import datasets

    raw = ds.cast_column("image", datasets.Image(decode=False))
    return [plain(raw[i]) for i in range(len(raw))]


def main() -> None:
    import datasets

    FEATURES = features()  # noqa: N806
    shutil.rmtree(HERE, ignore_errors=True)
    HERE.mkdir(parents=True)
    train = datasets.Dataset.from_dict(rows(0, 7), features=FEATURES)
    test = datasets.Dataset.from_dict(rows(100, 3), features=FEATURES)
    whole = datasets.DatasetDict({"train": train, "test": test})
    whole.save_to_disk(str(HERE / "dict"), num_shards={"train": 2, "test": 1})
    test.save_to_disk(str(HERE / "single"))
    cache = datasets.Dataset.from_dict(rows(200, 4), features=FEATURES)
    cache = cache.flatten_indices(cache_file_name=str(HERE / "cache.arrow"))
    cache.to_parquet(str(HERE / "cache.parquet"))
    reloaded = datasets.load_from_disk(str(HERE / "dict"))
    expected = {
        "train": read_back(reloaded["train"]),
        "test": read_back(reloaded["test"]),
        "cache": read_back(datasets.Dataset.from_file(str(HERE / "cache.arrow"))),
        "parquet": read_back(datasets.Dataset.from_parquet(str(HERE / "cache.parquet"))),
        "features": FEATURES.to_dict(),
        "images": {str(i): np.asarray(Image.open(io.BytesIO(png(i)))).tolist()
                   for i in [*range(7), 100, 101, 102, 200, 201, 202, 203]},
        "datasets_version": datasets.__version__,
    }
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False)
                                        + "\n")
    for leftover in HERE.glob("**/cache-*.arrow"):  # temporary files of from_parquet
        leftover.unlink()


if __name__ == "__main__":
    main()
