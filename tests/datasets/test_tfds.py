"""fl.datasets.load reads the golden TFDS directories element for element as
tfds.as_numpy(tfds.load(...)) does (tfds.data_source for ArrayRecord), recorded by
record_tfds.py with tensorflow-datasets 4.9.10."""

import numpy as np
import pytest
from tfds_golden import ROOT, assert_same, expected

import feedline as fl
from feedline.datasets import load

CASES = expected()["cases"]


def _case_id(case):
    extra = ",".join(f"{k}={v}" for k, v in case["kwargs"].items())
    return f"{case['name']}|{case['split']}|{extra}"


def _load(case):
    kwargs = dict(case["kwargs"])
    kwargs.pop("data_source", None)
    return load(case["name"], split=case["split"], data_dir=ROOT, **kwargs)


@pytest.mark.parametrize("case", [c for c in CASES if c["error"] is None], ids=_case_id)
def test_matches_tfds(case):
    if case["kwargs"].get("data_source"):
        pytest.importorskip("array_record")  # feedline[array_record]
    ds = _load(case)
    got = {k: list(v) for k, v in ds.items()} if isinstance(ds, dict) else list(ds)
    # tfds.data_source (ArrayRecord) gives Python scalars for 0-d values where tfds.load
    # gives NumPy scalars: feedline gives NumPy scalars for both formats.
    assert_same(got, case["value"], _case_id(case),
                exact_types=not case["kwargs"].get("data_source"))


@pytest.mark.parametrize("case", [c for c in CASES if c["error"] is not None], ids=_case_id)
def test_fails_like_tfds(case):
    assert case["error"].startswith("ValueError")
    with pytest.raises(ValueError, match="selects no examples"):
        _load(case)


def test_every_feature_type_is_covered():
    info = load("fl_features", split="train", data_dir=ROOT, with_info=True)[1]
    kinds = {type(f).__name__ for f in info.features.features.values()}
    kinds |= {type(f.feature).__name__ for f in info.features.features.values()
              if hasattr(f, "feature")}
    assert kinds >= {"Image", "ClassLabel", "Tensor", "Scalar", "Text", "Sequence",
                     "FeaturesDict", "Audio", "BBoxFeature", "Video"}


def test_info():
    ds, info = load("fl_features", split="train", data_dir=ROOT, with_info=True)
    assert info.name == "fl_features" and info.version == "1.0.0"
    assert info.full_name == "fl_features/1.0.0" and info.config_name is None
    assert info.description == "Every TFDS feature type in common use."
    assert info.citation == "@misc{feedline, title={feedline golden data}}"
    assert info.homepage == "https://example.org/feedline"
    assert info.supervised_keys == ("image_png", "label")
    assert info.file_format == "tfrecord" and not info.disable_shuffling
    assert {k: (v.num_examples, v.num_shards, v.shard_lengths) for k, v in info.splits.items()} \
        == {"train": (5, 2, (2, 3)), "test": (3, 2, (2, 1))}
    label = info.features["label"]
    assert label.names == ["cat", "dog", "bird"] and label.num_classes == 3
    assert label.int2str(2) == "bird" and label.str2int("dog") == 1
    nested = info.features["nested"]["b"]["d"]  # ClassLabel without names
    assert nested.names is None and nested.num_classes == 4 and nested.int2str(3) == "3"
    with pytest.raises(ValueError, match="Invalid string class label 'fish'"):
        label.str2int("fish")
    assert info.features["image_png"].shape == (None, None, 3)
    assert info.features["tensor_zlib"].encoding == "zlib"
    assert info.features["audio"].sample_rate == 8000
    assert info.features["seq"].length is None and info.features["seq3"].length == 3
    order = load("fl_order/big", data_dir=ROOT, with_info=True)[1]
    assert order.config_name == "big" and order.version == "1.1.0"
    assert order.config_description == "big ids" and order.supervised_keys == ("id", "label")
    array = load("fl_array", data_dir=ROOT, with_info=True)[1]
    assert array.file_format == "array_record" and array.disable_shuffling


def test_versions_and_configs():
    def first_id(name):
        return int(next(iter(load(name, split="train[:1]", data_dir=ROOT)))["id"])

    assert first_id("fl_order/small:1.0.0") == 39
    assert first_id("fl_order/small") == 500_039  # newest version
    assert first_id("fl_order/big:1.0.0") == 1_000_039
    assert first_id("fl_order/big:1.*.*") == 1_500_039
    assert first_id("fl_order") == 500_039  # default config (.config/metadata.json): small


def test_list_datasets():
    assert fl.datasets.list_datasets(ROOT) == [
        "fl_array:2.0.0", "fl_features:1.0.0", "fl_order/big:1.0.0", "fl_order/big:1.1.0",
        "fl_order/small:1.0.0", "fl_order/small:1.1.0"]
    assert fl.datasets.list is fl.datasets.list_datasets


def test_default_data_dir(monkeypatch):
    monkeypatch.setenv("TFDS_DATA_DIR", str(ROOT))
    assert len(list(load("fl_order/small", split="test"))) == 10


def test_decoders_skip_and_function():
    skip = fl.datasets.SkipDecoding()
    ds = load("fl_features", split="train[:2]", data_dir=ROOT,
              decoders={"image_png": skip, "frames": skip,
                        "nested": {"a": lambda x: x + 1}})
    plain = list(load("fl_features", split="train[:2]", data_dir=ROOT))
    for got, want in zip(ds, plain):
        assert got["image_png"][:4] == b"\x89PNG"
        assert fl.image.decode_image(got["image_png"]).tolist() == want["image_png"].tolist()
        assert got["frames"].dtype == object and len(got["frames"]) == len(want["frames"])
        assert got["nested"]["a"] == want["nested"]["a"] + 1
        assert np.array_equal(got["label"], want["label"])


def test_add_tfds_id():
    config = fl.datasets.ReadConfig(add_tfds_id=True)
    ids = [x["tfds_id"] for x in load("fl_order/small", split="test[3:6]", data_dir=ROOT,
                                       read_config=config)]
    # test shards hold 2, 3, 3, 2 records: records 3..5 are shard 1's 1, 2 and shard 2's 0.
    assert ids == [b"fl_order-test.tfrecord-00001-of-00004__1",
                   b"fl_order-test.tfrecord-00001-of-00004__2",
                   b"fl_order-test.tfrecord-00002-of-00004__0"]


def test_interleave_config_changes_the_order():
    config = fl.datasets.ReadConfig(interleave_cycle_length=1)
    ids = [int(x["id"]) for x in load("fl_order/small:1.0.0", split="train", data_dir=ROOT,
                                      read_config=config)]
    default = [int(x["id"]) for x in load("fl_order/small:1.0.0", split="train",
                                          data_dir=ROOT)]
    assert sorted(ids) == sorted(default) == list(range(103)) and ids != default
    assert ids[16:26] == default[64:74]  # cycle 1: shard 0 read to its end (26 records)


def test_readme_style_pipeline():
    ds = load("fl_features", split="train", data_dir=ROOT, as_supervised=True)
    images, labels = zip(*ds.map(lambda image, label: (image.mean(), label)))
    assert [int(x) for x in labels] == [
        int(x["label"]) for x in load("fl_features", split="train", data_dir=ROOT)]
