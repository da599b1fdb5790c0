"""Bad input to fl.datasets.load: each error names the file or dataset and what was expected."""

import json
import os
import shutil

import pytest
from tfds_golden import ROOT

import feedline as fl
from feedline.datasets import (
    DatasetNotFoundError,
    FeatureError,
    SplitNotFoundError,
    load,
)


@pytest.fixture
def order_dir(tmp_path):
    """A writable copy of fl_order/small:1.0.0 as data_dir/<name>/<version>."""
    target = tmp_path / "fl_order" / "1.0.0"
    shutil.copytree(ROOT / "fl_order" / "small" / "1.0.0", target)
    return tmp_path, target


def test_missing_dataset_lists_what_is_there():
    with pytest.raises(DatasetNotFoundError, match="no dataset 'mnist'") as error:
        load("mnist", split="train", data_dir=ROOT)
    assert "fl_features:1.0.0" in str(error.value) and str(ROOT) in str(error.value)


def test_missing_config_and_version_list_what_is_there():
    with pytest.raises(DatasetNotFoundError, match=r"no config 'huge'.*\['big', 'small'\]"):
        load("fl_order/huge", data_dir=ROOT)
    with pytest.raises(DatasetNotFoundError,
                       match=r"version matching '2.0.0'.*\['1.0.0', '1.1.0'\]"):
        load("fl_order/small:2.0.0", data_dir=ROOT)


def test_several_configs_and_no_default(tmp_path):
    for config in ("a", "b"):
        os.makedirs(tmp_path / "ds" / config / "1.0.0")
        (tmp_path / "ds" / config / "1.0.0" / "features.json").write_text("{}")
    with pytest.raises(DatasetNotFoundError, match=r"several configs.*\['a', 'b'\]"):
        load("ds", data_dir=tmp_path)


def test_bad_names():
    with pytest.raises(ValueError, match="is not 'name'"):
        load("my ds", data_dir=ROOT)
    with pytest.raises(ValueError, match="is not 'name'"):
        load("fl_order:1.x", data_dir=ROOT)


def test_missing_split_lists_the_splits():
    with pytest.raises(SplitNotFoundError, match=r"no split 'validation'") as error:
        load("fl_order/small", split="train+validation[:5]", data_dir=ROOT)
    assert "train (103 examples), test (10 examples)" in str(error.value)
    assert "dataset_info.json" in str(error.value)
    assert isinstance(error.value, ValueError)  # as TFDS's error


def test_malformed_split_through_load():
    with pytest.raises(ValueError, match=r"malformed split 'train\[:x\]'"):
        load("fl_order/small", split="train[:x]", data_dir=ROOT)
    with pytest.raises(ValueError, match="incompatible with 103 examples"):
        load("fl_order/small", split="train[:1000]", data_dir=ROOT)


def test_unknown_feature_type(order_dir):
    data_dir, directory = order_dir
    features = json.loads((directory / "features.json").read_text())
    features["featuresDict"]["features"]["mask"] = {
        "pythonClassName": "tensorflow_datasets.core.features.labeled_image.LabeledImage",
        "labeledImage": {"shape": {}}}
    (directory / "features.json").write_text(json.dumps(features))
    with pytest.raises(FeatureError, match="unknown feature type 'LabeledImage'") as error:
        load("fl_order", split="train", data_dir=data_dir)
    assert str(directory / "features.json") + "/mask" in str(error.value)


def test_unknown_dtype(order_dir):
    data_dir, directory = order_dir
    features = json.loads((directory / "features.json").read_text())
    features["featuresDict"]["features"]["id"]["tensor"]["dtype"] = "int128"
    (directory / "features.json").write_text(json.dumps(features))
    with pytest.raises(FeatureError, match=r"features.json/id: dtype 'int128' is not supported"):
        load("fl_order", split="train", data_dir=data_dir)


def test_damaged_shard_names_file_and_offset(order_dir):
    data_dir, directory = order_dir
    shard = directory / "fl_order-train.tfrecord-00001-of-00004"
    data = shard.read_bytes()
    shard.write_bytes(data[:len(data) - 30])  # the last record loses its end
    ds = load("fl_order", split="train", data_dir=data_dir,
              read_config=fl.datasets.ReadConfig(interleave_cycle_length=1))
    it = iter(ds)
    got = [next(it) for _ in range(26 + 25)]  # shard 0 and all but the last record of 1
    assert len(got) == 51
    with pytest.raises(fl.DataLossError, match="truncated record at") as error:
        next(it)
    assert str(shard) in str(error.value)


def test_missing_shard_file(order_dir):
    data_dir, directory = order_dir
    os.remove(directory / "fl_order-train.tfrecord-00002-of-00004")
    with pytest.raises(DatasetNotFoundError, match="fl_order-train.tfrecord-00002-of-00004"):
        load("fl_order", split="train", data_dir=data_dir)
    assert len(list(load("fl_order", split="train[:52]", data_dir=data_dir))) == 52


def test_record_without_a_feature(order_dir):
    data_dir, directory = order_dir
    features = json.loads((directory / "features.json").read_text())
    features["featuresDict"]["features"]["extra"] = {
        "pythonClassName": "tensorflow_datasets.core.features.tensor_feature.Tensor",
        "tensor": {"dtype": "int64", "shape": {}, "encoding": "none"}}
    (directory / "features.json").write_text(json.dumps(features))
    with pytest.raises(ValueError, match="a record lacks feature 'extra'"):
        next(iter(load("fl_order", split="train", data_dir=data_dir)))


def test_as_supervised_without_keys():
    with pytest.raises(ValueError, match="has no supervised_keys"):
        load("fl_array", split="train", data_dir=ROOT, as_supervised=True)


def test_bad_decoders():
    with pytest.raises(KeyError, match=r"no feature \['nope'\]"):
        load("fl_order/small", split="test", data_dir=ROOT,
             decoders={"nope": fl.datasets.SkipDecoding()})


def test_not_a_prepared_directory(tmp_path):
    os.makedirs(tmp_path / "ds" / "1.0.0")
    (tmp_path / "ds" / "1.0.0" / "features.json").write_text("{}")
    with pytest.raises(DatasetNotFoundError, match="has no dataset_info.json"):
        load("ds", data_dir=tmp_path)
