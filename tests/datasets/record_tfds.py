"""Writes the golden TFDS directories under tests/data/tfds/ with TensorFlow Datasets itself,
and records what ``tfds.as_numpy(tfds.load(...))`` gives for them (``expected.pkl``).

Run in the TensorFlow environment (never by the tests, which need no TensorFlow)::

    benchmarks/.venvs/tf/bin/python tests/datasets/record_tfds.py

The builders are tiny and download nothing. ``fl_features`` covers every feature type
feedline decodes; ``fl_order`` (two configs, two versions, 4 train shards of ~26 examples)
covers split slicing and TFDS's file interleave (cycle 16, block 16); ``fl_array`` is
``fl_order``'s data as ArrayRecord shards with ``disable_shuffling``.
"""

from __future__ import annotations

import lzma
import os
import pickle
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "data" / "tfds"

# Split expressions recorded for each dataset (name -> list of specs).
ORDER_SPLITS = [
    None, "train", "test", "train[:10%]", "train[10%:]+test", "train[:30]", "train[-10:]",
    "test[25%:50%]", "train[33%:67%]", "train[:-5%]", "train[5:17]+train[40:70]",
    "train[1shard]", "train[:2shard]+test[-1shard:]", "train[-3:-1]", "all", "test[0:0]",
    "train[99.5%:]", "train[12.5%:37.5%]",
]
FEATURE_SPLITS = [None, "train", "test", "train[:50%]", "train[1:]+test[:1]"]


def _builders():
    import numpy as np
    import tensorflow_datasets as tfds

    rng = np.random.RandomState(0)
    features = tfds.features

    class FlFeatures(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        """Every feature type feedline decodes."""

        name = "fl_features"
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(builder=self,
                description="Every TFDS feature type in common use.",
                citation="@misc{feedline, title={feedline golden data}}",
                homepage="https://example.org/feedline",
                supervised_keys=("image_png", "label"),
                features=features.FeaturesDict({
                    "image_png": features.Image(shape=(None, None, 3), encoding_format="png"),
                    "image_jpeg": features.Image(shape=(None, None, 3),
                                                 encoding_format="jpeg"),
                    "image_gray": features.Image(shape=(4, 5, 1)),
                    "image_any": features.Image(),
                    "label": features.ClassLabel(names=["cat", "dog", "bird"]),
                    "tensor": features.Tensor(shape=(2, 3), dtype=np.float32),
                    "tensor_var": features.Tensor(shape=(None,), dtype=np.int32),
                    "tensor_var2": features.Tensor(shape=(None, 2), dtype=np.uint8),
                    "tensor_zlib": features.Tensor(shape=(None, 2), dtype=np.int16,
                                                   encoding="zlib"),
                    "tensor_bytes": features.Tensor(shape=(None, None), dtype=np.float64,
                                                    encoding="bytes"),
                    "flag": features.Tensor(shape=(), dtype=np.bool_),
                    "big": features.Tensor(shape=(2,), dtype=np.uint64),
                    "text": features.Text(),
                    "scalar": features.Scalar(dtype=np.float64),
                    "seq": features.Sequence({"token": np.int64, "score": np.float32}),
                    "seq3": features.Sequence(np.int32, length=3),
                    "seq_text": features.Sequence(features.Text()),
                    "ragged": features.Sequence(features.Sequence(np.int64)),
                    "frames": features.Sequence(features.Image(shape=(2, 3, 3))),
                    "video": features.Video(shape=(None, 3, 4, 3)),
                    "nested": {"a": np.int64,
                               "b": {"c": features.Text(), "d": features.ClassLabel(
                                   num_classes=4)}},
                    "audio": features.Audio(shape=(None,), dtype=np.int16, sample_rate=8000),
                    "audio2": features.Audio(shape=(None, 2), dtype=np.float32,
                                             sample_rate=16000),
                    "bbox": features.BBoxFeature(),
                    "bboxes": features.Sequence(features.BBoxFeature()),
                }),
            )

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples(5, 0), "test": self._generate_examples(3, 100)}

        def _generate_examples(self, count, base):
            for i in range(count):
                h, w = 3 + i % 3, 4 + i % 2
                n = i % 4
                yield base + i, {
                    "image_png": rng.randint(0, 256, (h, w, 3)).astype(np.uint8),
                    "image_jpeg": rng.randint(0, 256, (8, 8, 3)).astype(np.uint8),
                    "image_gray": rng.randint(0, 256, (4, 5, 1)).astype(np.uint8),
                    "image_any": rng.randint(0, 256, (2, 2, 3)).astype(np.uint8),
                    "label": ["cat", "dog", "bird"][i % 3],
                    "tensor": rng.randn(2, 3).astype(np.float32),
                    "tensor_var": np.arange(n, dtype=np.int32) - 2,
                    "tensor_var2": np.arange(2 * n, dtype=np.uint8).reshape(n, 2),
                    "tensor_zlib": (np.arange(2 * (n + 1), dtype=np.int16) * -300
                                    ).reshape(n + 1, 2),
                    "tensor_bytes": rng.randn(n + 1, 3 - n % 2),
                    "flag": bool(i % 2),
                    "big": np.array([2**64 - 1 - i, i], dtype=np.uint64),
                    "text": f"example {base + i} ünïcode",
                    "scalar": float(i) / 3,
                    "seq": {"token": np.arange(n, dtype=np.int64) * 7,
                            "score": np.linspace(0, 1, n).astype(np.float32)},
                    "seq3": np.array([i, i + 1, i + 2], dtype=np.int32),
                    "seq_text": [f"w{j}" for j in range(n)],
                    "ragged": [list(range(j)) for j in range(n + 1)],
                    "frames": rng.randint(0, 256, (n, 2, 3, 3)).astype(np.uint8),
                    "video": rng.randint(0, 256, (1 + n % 2, 3, 4, 3)).astype(np.uint8),
                    "nested": {"a": i * 1000, "b": {"c": f"nested {i}", "d": i % 4}},
                    "audio": (np.arange(5 + i, dtype=np.int16) - 3) * 1000,
                    "audio2": rng.randn(3 + i, 2).astype(np.float32),
                    "bbox": features.BBox(0.1 * (i % 5), 0.2, 0.5 + 0.1 * (i % 5), 0.9),
                    "bboxes": [features.BBox(0.0, 0.0, 0.5, 0.5 + 0.1 * j) for j in range(n)],
                }

    class OrderBase(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        """Integer ids: split slicing, shards, interleave order, configs and versions."""

        name = "fl_order"
        BUILDER_CONFIGS = [tfds.core.BuilderConfig(name="small", description="small ids"),
                           tfds.core.BuilderConfig(name="big", description="big ids")]
        DEFAULT_CONFIG_NAME = "big"

        def _info(self):
            return tfds.core.DatasetInfo(builder=self,
                description="Integer ids.",
                supervised_keys=("id", "label"),
                features=features.FeaturesDict({
                    "id": np.int64,
                    "label": features.ClassLabel(names=["even", "odd"]),
                }),
            )

        def _split_generators(self, dl_manager):
            offset = 0 if self.builder_config.name == "small" else 1_000_000
            return {"train": self._generate_examples(103, offset),
                    "test": self._generate_examples(10, offset + 10_000)}

        def _generate_examples(self, count, offset):
            for i in range(count):
                yield i, {"id": offset + i + self.ID_SHIFT, "label": i % 2}

    class OrderV1(OrderBase, skip_registration=True):
        name = "fl_order"
        VERSION = tfds.core.Version("1.0.0")
        ID_SHIFT = 0

    class OrderV2(OrderBase, skip_registration=True):
        name = "fl_order"
        VERSION = tfds.core.Version("1.1.0")
        ID_SHIFT = 500_000

    class ArrayOrder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        """ArrayRecord shards, examples in generation order."""

        name = "fl_array"
        VERSION = tfds.core.Version("2.0.0")

        def _info(self):
            return tfds.core.DatasetInfo(builder=self,
                description="ArrayRecord ids.",
                disable_shuffling=True,
                features=features.FeaturesDict({
                    "id": np.int64,
                    "name": features.Text(),
                    "image": features.Image(shape=(2, 2, 3)),
                }),
            )

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples(40, 0),
                    "test": self._generate_examples(6, 1000)}

        def _generate_examples(self, count, offset):
            for i in range(count):
                yield i, {"id": offset + i, "name": f"n{offset + i}",
                          "image": np.full((2, 2, 3), i, np.uint8)}

    return FlFeatures, OrderV1, OrderV2, ArrayOrder


def _to_plain(value):
    """tf.RaggedTensor values (and nests) as plain lists; the rest as tfds.as_numpy gives."""
    import numpy as np
    import tensorflow as tf

    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_to_plain(v) for v in value)
    if isinstance(value, (tf.RaggedTensor, tf.compat.v1.ragged.RaggedTensorValue)):
        return {"__ragged__": value.to_list()}
    assert isinstance(value, (np.ndarray, np.generic, bytes, int, float)), type(value)
    return value


def _record(name, data_dir, split, **kwargs):
    import tensorflow_datasets as tfds

    if kwargs.pop("data_source", False):
        # TFDS reads ArrayRecord only as a random-access data source (as_dataset raises).
        ds = tfds.data_source(name, split=split, data_dir=str(data_dir), **kwargs)
        if isinstance(ds, dict):
            return {key: [_to_plain(value[i]) for i in range(len(value))]
                    for key, value in ds.items()}
        return [_to_plain(ds[i]) for i in range(len(ds))]
    ds = tfds.load(name, split=split, data_dir=str(data_dir), **kwargs)
    if isinstance(ds, dict):
        return {key: [_to_plain(x) for x in tfds.as_numpy(value)] for key, value in ds.items()}
    return [_to_plain(x) for x in tfds.as_numpy(ds)]


SPLIT_SIZES = {"train": [26, 26, 25, 26], "test": [2, 3, 3, 2], "big": [500, 501], "seven": [7]}
ARITH_SPECS = [
    "train", "train[:10%]", "train[10%:]", "train[10%:]+test", "train[:1000]", "train[-10:]",
    "test[25%:50%]", "train[:50%]", "train[50%:]", "train[0.5%:1.5%]", "train[-50%:]",
    "big[:0.1%]", "big[99.9%:]", "big[12.5%:87.5%]", "big[:-0.05%]", "seven[:50%]",
    "seven[50%:]", "seven[:14.3%]", "seven[14.2%:28.6%]", "seven[-1:]", "seven[:7]",
    "seven[:8]", "seven[-8:]", "train[1shard]", "train[-1shard]", "train[:-1shard]",
    "train[2shard:]", "train[-3:-1]", "train[5:3]", "all", "test + seven[1:2]",
    "train[10_0:]", "train[:101%]", "train[:]", "train[::]", "train[1.5:]", "train[1]",
    "train[10%]", "nope", "all[:5]", "train[a:b]", "train[", "", "train++test",
]
PCT1_CASES = [("big", 10, 20), ("big", None, 33), ("big", -5, None), ("big", 0.5, 99.5),
              ("train", 1, 2)]


def record_split_arithmetic():
    """TFDS's absolute instructions ``(split, from, to)`` for each spec (or its error)."""
    import types

    from tensorflow_datasets.core import splits as splits_lib

    infos = {name: types.SimpleNamespace(name=name, shard_lengths=lengths,
                                         num_examples=sum(lengths))
             for name, lengths in SPLIT_SIZES.items()}

    def absolute(instruction):
        out = []
        for a in instruction.to_absolute(infos):
            n = infos[a.splitname].num_examples
            out.append((a.splitname, a.from_ or 0, n if a.to is None else a.to))
        return out

    def attempt(fn):
        try:
            return {"value": fn(), "error": None}
        except Exception as exc:  # noqa: BLE001 - the error is what is recorded
            return {"value": None, "error": type(exc).__name__}

    cases = {spec: attempt(lambda spec=spec: absolute(
        splits_lib.AbstractSplit.from_spec(spec))) for spec in ARITH_SPECS}
    pct1 = [attempt(lambda c=c: absolute(splits_lib.ReadInstruction(
        c[0], from_=c[1], to=c[2], unit="%", rounding="pct1_dropremainder")))
        for c in PCT1_CASES]
    return {"sizes": SPLIT_SIZES, "specs": cases, "pct1": pct1}


def main() -> None:
    import tensorflow_datasets as tfds

    FlFeatures, OrderV1, OrderV2, ArrayOrder = _builders()
    if ROOT.exists():
        shutil.rmtree(ROOT)
    ROOT.mkdir(parents=True)
    shards = {FlFeatures: 2, OrderV1: 4, OrderV2: 4, ArrayOrder: 2}
    for cls in [FlFeatures, OrderV1, OrderV2, ArrayOrder]:
        configs = [c.name for c in cls.BUILDER_CONFIGS] or [None]
        for config in configs:
            kwargs = {"file_format": "array_record"} if cls is ArrayOrder else {}
            builder = cls(data_dir=str(ROOT), config=config, **kwargs)
            builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
                num_shards=shards[cls]))
    # tfds.load finds these directories without the builder classes (read-only builders).
    expected = {"tfds_version": tfds.__version__, "cases": []}

    def case(name, split, **kwargs):
        try:
            value = _record(name, ROOT, split, **kwargs)
            error = None
        except Exception as exc:  # noqa: BLE001 - the error is what is recorded
            value, error = None, f"{type(exc).__name__}: {exc}"
        expected["cases"].append({"name": name, "split": split, "kwargs": dict(kwargs),
                                  "value": value, "error": error})
        print(name, split, kwargs, "->", error or "ok", file=sys.stderr)

    for split in FEATURE_SPLITS:
        case("fl_features", split)
    case("fl_features", "train", as_supervised=True)
    for name in ["fl_order", "fl_order/small", "fl_order/small:1.0.0", "fl_order:1.0.0"]:
        case(name, "train")
    for split in ORDER_SPLITS:
        case("fl_order/big:1.1.0", split)
    case("fl_order/small", "train[:10%]+test", as_supervised=True)
    for split in [None, "train", "train[:25%]", "train[-7:]+test[:2]", "test[1:4]"]:
        case("fl_array", split, data_source=True)
    expected["split_arithmetic"] = record_split_arithmetic()
    shutil.rmtree(ROOT / "downloads", ignore_errors=True)
    with lzma.open(ROOT / "expected.pkl.xz", "wb") as f:
        pickle.dump(expected, f, protocol=4)
    total = sum(p.stat().st_size for p in ROOT.rglob("*") if p.is_file())
    print(f"wrote {ROOT} ({total} bytes)", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
