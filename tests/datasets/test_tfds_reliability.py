"""Damaged and crafted TFDS folders (issue 41): shards shorter or longer than
``dataset_info.json`` says, nonsense metadata, templates reaching outside the folder, records
that do not decode. Every one is a feedline error naming the file and field, never a raw
exception, a huge allocation or silently shorter data."""

import json
import os
import shutil
import zlib

import numpy as np
import pytest
from tfds_golden import ROOT

import feedline as fl
from feedline.datasets import DatasetNotFoundError, FeatureError, load

SHARD = "fl_order-train.tfrecord-{:05d}-of-00004"
LENGTHS = [26, 26, 25, 26]


@pytest.fixture
def order_dir(tmp_path):
    """A writable copy of fl_order/small:1.0.0 as data_dir/fl_order/1.0.0."""
    target = tmp_path / "data" / "fl_order" / "1.0.0"
    shutil.copytree(ROOT / "fl_order" / "small" / "1.0.0", target)
    return tmp_path / "data", target


def edit_info(directory, edit):
    path = directory / "dataset_info.json"
    info = json.loads(path.read_text())
    edit(info)
    path.write_text(json.dumps(info))


def train(info):
    return next(s for s in info["splits"] if s["name"] == "train")


def rewrite_shard(path, keep):
    records = [bytes(r) for r in fl.TFRecordDataset(str(path))]
    with fl.TFRecordWriter(str(path)) as writer:
        for record in keep(records):
            writer.write(record)


def read_all(data_dir, split="train", **kwargs):
    return list(load("fl_order", split=split, data_dir=data_dir, **kwargs))


# --------------------------------------------------------------------------- shard lengths
@pytest.mark.parametrize("split", ["train", "train[:60]", "train[40:60]", "train[1shard]"])
def test_a_shard_cut_at_a_record_boundary_is_data_loss(order_dir, split):
    data_dir, directory = order_dir
    shard = directory / SHARD.format(1)
    rewrite_shard(shard, lambda records: records[:20])  # 26 listed, 20 left: whole records
    with pytest.raises(fl.DataLossError) as error:
        read_all(data_dir, split, read_config=fl.datasets.ReadConfig(interleave_cycle_length=1))
    message = str(error.value)
    assert str(shard) in message and "20" in message and "26" in message, message
    assert error.value.path == str(shard) and error.value.record_index == 20


def test_the_records_before_the_truncation_come_first(order_dir):
    data_dir, directory = order_dir
    rewrite_shard(directory / SHARD.format(0), lambda records: records[:10])
    it = iter(load("fl_order", split="train", data_dir=data_dir,
                   read_config=fl.datasets.ReadConfig(interleave_cycle_length=1)))
    assert len([next(it) for _ in range(10)]) == 10
    with pytest.raises(fl.DataLossError, match="ends after 10 records"):
        next(it)


def test_a_shard_with_more_records_than_listed_is_data_loss(order_dir):
    data_dir, directory = order_dir
    shard = directory / SHARD.format(2)
    rewrite_shard(shard, lambda records: records + records[:3])  # 25 listed, 28 there
    with pytest.raises(fl.DataLossError, match="holds more than the 25 records") as error:
        read_all(data_dir)
    assert str(shard) in str(error.value)


def test_an_empty_shard_is_data_loss(order_dir):
    data_dir, directory = order_dir
    (directory / SHARD.format(3)).write_bytes(b"")
    with pytest.raises(fl.DataLossError, match="ends after 0 records, but dataset_info.json's "
                       "shardLengths gives it 26"):
        read_all(data_dir)


def test_checked_shards_still_checkpoint_and_batch(order_dir):
    from feedline.testing import check_checkpointing

    data_dir, _ = order_dir
    ds = load("fl_order", split="train[5:90]", data_dir=data_dir)
    assert len(list(ds)) == 85
    check_checkpointing(ds.batch(6), steps=[0, 2, 7], epochs=1)


@pytest.mark.parametrize("lengths, field", [
    (["26", "-1", "25", "26"], "shardLengths[1]"),
    (["26", "2.5", "25", "26"], "shardLengths[1]"),
    ([26, 26.5, 25, 26], "shardLengths[1]"),
    (["26", "abc", "25", "26"], "shardLengths[1]"),
    (["26", [1], "25", "26"], "shardLengths[1]"),
    (["26", True, "25", "26"], "shardLengths[1]"),
    (["26", "99999999999999999999999", "25", "26"], "shardLengths[1]"),
    ("26,26,25,26", "shardLengths"),
], ids=["negative", "decimal-string", "float", "word", "list", "bool", "overflow", "string"])
def test_nonsense_shard_lengths_name_the_file_and_field(order_dir, lengths, field):
    data_dir, directory = order_dir
    edit_info(directory, lambda info: train(info).update(shardLengths=lengths))
    with pytest.raises(fl.InvalidArgumentError) as error:
        load("fl_order", split="train", data_dir=data_dir)
    assert str(directory / "dataset_info.json") in str(error.value)
    assert field in str(error.value)


def test_fewer_lengths_than_shard_files(order_dir):
    data_dir, directory = order_dir
    edit_info(directory, lambda info: train(info).update(shardLengths=["26", "26", "25"]))
    with pytest.raises(fl.DataLossError, match=r"shardLengths of split 'train' lists 3 shards, "
                       r"but the folder also holds fl_order-train.tfrecord-00000-of-00004"):
        load("fl_order", split="train", data_dir=data_dir)


def test_fewer_lengths_than_shard_files_with_an_index_only_template(order_dir):
    data_dir, directory = order_dir
    for index in range(4):
        os.rename(directory / SHARD.format(index),
                  directory / f"fl_order-train.tfrecord-{index:05d}")
    template = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_INDEX}"
    edit_info(directory, lambda info: train(info).update(filepathTemplate=template))
    assert len(read_all(data_dir)) == sum(LENGTHS)
    # The fourth shard is there but no longer listed: it was silently left out.
    edit_info(directory, lambda info: train(info).update(shardLengths=["26", "26", "25"]))
    with pytest.raises(fl.DataLossError, match="also holds fl_order-train.tfrecord-00003"):
        load("fl_order", split="train", data_dir=data_dir)


def test_num_shards_and_num_examples_must_agree(order_dir):
    data_dir, directory = order_dir
    edit_info(directory, lambda info: train(info).update(numShards="5"))
    with pytest.raises(fl.InvalidArgumentError, match=r"numShards: 5 shards, but shardLengths "
                       r"lists 4"):
        load("fl_order", split="train", data_dir=data_dir)
    edit_info(directory, lambda info: train(info).update(
        numShards="4", statistics={"numExamples": "104"}))
    with pytest.raises(fl.InvalidArgumentError, match=r"statistics.numExamples: 104 examples, "
                       r"but the shardLengths add up to 103"):
        load("fl_order", split="train", data_dir=data_dir)
    edit_info(directory, lambda info: train(info).update(statistics={"numExamples": "103"}))
    assert len(read_all(data_dir)) == 103


# --------------------------------------------------------------------------- crafted metadata
def _nested_keys(depth):
    node = {"featureKey": "id"}
    for _ in range(depth):
        node = {"tuple": {"items": [node]}}
    return node


@pytest.mark.parametrize("edit, field", [
    (lambda info: info.update(supervisedKeys=_nested_keys(40)), "supervisedKeys"),
    (lambda info: info.update(supervisedKeys={"tuple": {"items": [5]}}), "supervisedKeys"),
    (lambda info: info.update(location=["https://example.org"]), "location"),
    (lambda info: info.update(location={"urls": [5]}), "location.urls[0]"),
    (lambda info: info.update(releaseNotes=[1, 2]), "releaseNotes"),
    (lambda info: info.update(name=["x"]), "name"),
    (lambda info: info.update(splits={"train": {}}), "splits"),
    (lambda info: info["splits"].append(5), "splits[2]"),
    (lambda info: train(info).pop("name"), "splits[0].name"),
    (lambda info: train(info).update(name="a/b"), "splits[0].name"),
    (lambda info: train(info).update(name="2.5"), "splits[0].name"),
    (lambda info: info["splits"].append(dict(train(info))), "listed twice"),
    (lambda info: train(info).update(numBytes={}), "numBytes"),
    (lambda info: train(info).update(filepathTemplate=7), "filepathTemplate"),
    (lambda info: info.update(fileFormat="parquet"), "fileFormat"),
], ids=["deep-keys", "keys-item", "location-list", "url", "notes", "name",
        "splits-dict", "split-int", "split-no-name", "split-slash", "split-dot", "split-twice", "num-bytes",
        "template-int", "file-format"])
def test_crafted_dataset_info_is_a_feedline_error(order_dir, edit, field):
    data_dir, directory = order_dir
    edit_info(directory, edit)
    with pytest.raises(fl.InvalidArgumentError) as error:
        load("fl_order", split="train", data_dir=data_dir)
    assert str(directory / "dataset_info.json") in str(error.value)
    assert field in str(error.value)


def test_supervised_keys_name_features_that_exist(order_dir):
    data_dir, directory = order_dir
    edit_info(directory, lambda info: info.update(supervisedKeys={"tuple": {"items": [
        {"featureKey": "id"}, {"featureKey": "nope"}]}}))
    assert len(read_all(data_dir)) == 103  # not asked for: not needed
    with pytest.raises(fl.InvalidArgumentError, match="supervisedKeys names the feature 'nope'"):
        load("fl_order", split="train", data_dir=data_dir, as_supervised=True)


DEEP = "[" * 100_000 + "]" * 100_000  # deeper than Python's JSON parser recurses


@pytest.mark.parametrize("text", ["[1, 2]", "{\"a\": ", "\xff\xfe", "null", "7", DEEP,
                                  '{"supervisedKeys": ' + DEEP + "}"])
def test_dataset_info_that_is_not_an_object(order_dir, text):
    data_dir, directory = order_dir
    (directory / "dataset_info.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(fl.InvalidArgumentError, match="dataset_info.json: ") as error:
        load("fl_order", split="train", data_dir=data_dir)
    assert error.value.path == str(directory / "dataset_info.json")


def test_features_json_too_deep_for_the_parser(order_dir):
    data_dir, directory = order_dir
    (directory / "features.json").write_text('{"featuresDict": ' + DEEP + "}")
    with pytest.raises(FeatureError, match="features.json: not valid JSON"):
        load("fl_order", split="train", data_dir=data_dir)


def test_a_fifo_as_metadata_does_not_block(order_dir):
    data_dir, directory = order_dir
    os.remove(directory / "features.json")
    os.mkfifo(directory / "features.json")
    with pytest.raises(FeatureError, match="features.json: not a regular file"):
        load("fl_order", split="train", data_dir=data_dir)


@pytest.mark.parametrize("template, complaint", [
    ("{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_INDEX:999999999}", "padding of at most 99"),
    ("{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_INDEX:1000}", "padding of at most 99"),
    ("{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_INDEX:{NUM_SHARDS}}", "padding of at most 99"),
    ("{DATASET}-{SPLIT}-{SHARD_INDEX!r}", "padding of at most 99"),
    ("{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}-{HOME}", "has the field {HOME}"),
    ("{DATASET.upper}-{SHARD_INDEX}", "has the field {DATASET.upper}"),
    ("{DATASET[0]}-{SHARD_INDEX}", "has the field {DATASET[0]}"),
    ("{0}-{SHARD_INDEX}", "has the field {0}"),
    ("{DATASET}-{SPLIT", "is not a template"),
    ("{DATASET}-{SPLIT}.tfrecord", "neither {SHARD_INDEX} nor {SHARD_X_OF_Y}"),
    ("x" * 2000 + "{SHARD_INDEX}", "longer than 1024"),
], ids=["huge-width", "wide", "nested", "conversion", "unknown", "attribute", "index",
        "positional", "unclosed", "no-index", "long"])
def test_templates_use_tfds_fields_and_bounded_widths(order_dir, template, complaint):
    data_dir, directory = order_dir
    edit_info(directory, lambda info: train(info).update(filepathTemplate=template))
    with pytest.raises(fl.InvalidArgumentError) as error:
        load("fl_order", split="train", data_dir=data_dir)
    message = str(error.value)
    assert complaint in message and "filepathTemplate" in message, message
    assert str(directory / "dataset_info.json") in message


def test_a_padded_template_tfds_could_write_reads(order_dir):
    data_dir, directory = order_dir
    for index in range(4):
        os.rename(directory / SHARD.format(index), directory / f"train-{index:0>7}.rec")
    template = "{SPLIT}-{SHARD_INDEX:0>7}.rec"
    edit_info(directory, lambda info: train(info).update(filepathTemplate=template))
    assert len(read_all(data_dir)) == 103


# --------------------------------------------------------------------------- confinement
@pytest.mark.parametrize("template", [
    "/etc/passwd", "/etc/{SHARD_X_OF_Y}", "../../outside-{SHARD_X_OF_Y}",
    "{SHARD_X_OF_Y}/../../../outside", "sub/../../{SHARD_INDEX}",
])
def test_a_template_cannot_leave_the_dataset_folder(order_dir, template):
    data_dir, directory = order_dir
    edit_info(directory, lambda info: train(info).update(filepathTemplate=template))
    with pytest.raises(fl.InvalidArgumentError) as error:
        load("fl_order", split="train", data_dir=data_dir)
    assert "filepathTemplate" in str(error.value) and "dataset_info.json" in str(error.value)


def test_names_in_the_template_cannot_leave_the_folder(order_dir):
    data_dir, directory = order_dir
    edit_info(directory, lambda info: info.update(name="../../../../../../etc"))
    with pytest.raises(fl.InvalidArgumentError, match="outside the dataset folder"):
        load("fl_order", split="train", data_dir=data_dir)
    edit_info(directory, lambda info: (info.update(name="fl_order"), train(info).update(
        name="..", filepathTemplate="{SPLIT}/{SHARD_X_OF_Y}")))
    with pytest.raises(fl.InvalidArgumentError, match=r"splits\[0\].name: expected a split "
                       r"name \(letters, digits, '_', '-'\), found \"..\""):
        load("fl_order", data_dir=data_dir)


def test_a_shard_linked_outside_the_folder_is_refused(order_dir, tmp_path):
    data_dir, directory = order_dir
    outside = tmp_path / "elsewhere.tfrecord"
    shutil.move(directory / SHARD.format(0), outside)
    os.symlink(outside, directory / SHARD.format(0))
    with pytest.raises(fl.InvalidArgumentError, match=r"filepathTemplate .* which is .*"
                       r"elsewhere.tfrecord'?, outside the dataset folder"):
        load("fl_order", split="train", data_dir=data_dir)


def test_a_shard_that_is_a_folder(order_dir):
    data_dir, directory = order_dir
    os.remove(directory / SHARD.format(0))
    os.mkdir(directory / SHARD.format(0))
    with pytest.raises(fl.InvalidArgumentError, match="is not a regular file"):
        load("fl_order", split="train", data_dir=data_dir)


def test_default_config_metadata_cannot_name_a_path(tmp_path):
    root = tmp_path / "data"
    for config in ("a", "b"):
        shutil.copytree(ROOT / "fl_order" / "small" / "1.0.0", root / "fl_order" / config / "1.0.0")
    os.makedirs(root / "fl_order" / ".config")
    metadata = root / "fl_order" / ".config" / "metadata.json"
    for bad in (["a"], {"default_config_name": "../../fl_order/a"}, {"default_config_name": 3}):
        metadata.write_text(json.dumps(bad))
        with pytest.raises((fl.InvalidArgumentError, DatasetNotFoundError)) as error:
            load("fl_order", split="train", data_dir=root)
        assert isinstance(error.value, fl.FeedlineError)
    metadata.write_text("[[[" * 2000)
    with pytest.raises(fl.InvalidArgumentError, match="metadata.json: not valid JSON"):
        load("fl_order", split="train", data_dir=root)


# --------------------------------------------------------------------------- features.json
def edit_features(directory, edit):
    path = directory / "features.json"
    proto = json.loads(path.read_text())
    edit(proto["featuresDict"]["features"])
    path.write_text(json.dumps(proto))


def _nested_dict(depth):
    node = {"tensor": {"dtype": "int64", "shape": {}}}
    for _ in range(depth):
        node = {"featuresDict": {"features": {"x": node}}}
    return node


@pytest.mark.parametrize("edit, field", [
    (lambda f: f["id"].update(pythonClassName=5), "id: pythonClassName"),
    (lambda f: f["id"]["tensor"].pop("dtype"), "id: tensor has no dtype"),
    (lambda f: f["id"]["tensor"].update(dtype=["int64"]), "id: dtype is not a string"),
    (lambda f: f["id"]["tensor"].update(shape={"dimensions": ["abc"]}), "dimensions[0]"),
    (lambda f: f["id"]["tensor"].update(shape={"dimensions": ["-2"]}), "dimensions[0]"),
    (lambda f: f["id"]["tensor"].update(shape={"dimensions": ["1"] * 40}), "at most 32"),
    (lambda f: f["id"]["tensor"].update(shape=[1]), "id: shape"),
    (lambda f: f["id"]["tensor"].update(encoding="lz4"), "id: Tensor encoding 'lz4'"),
    (lambda f: f["label"].update(classLabel={"numClasses": "x"}), "numClasses"),
    (lambda f: f["label"].update(classLabel=[]), "label: classLabel"),
    (lambda f: f.update(seq={"sequence": {"length": "-1"}}), "seq: sequence has no feature"),
    (lambda f: f.update(seq={"sequence": {"feature": 1}}), "seq[]"),
    (lambda f: f.update(img={"image": {"dtype": "float64", "shape": {}}}), "img: Image dtype"),
    (lambda f: f.update(v={"video": {"shape": {"dimensions": ["2"]}}}), "v: a video's shape"),
    (lambda f: f.update(deep=_nested_dict(50)), "nested more than 32"),
    (lambda f: f.update(deep=_nested_dict(300)), "nested more than 32"),
], ids=["class-name", "no-dtype", "dtype-list", "dim-word", "dim-negative", "rank", "shape-list",
        "encoding", "num-classes", "class-label-list", "no-feature", "feature-int",
        "image-dtype", "video-rank", "deep", "deeper"])
def test_crafted_features_json_is_a_feature_error(order_dir, edit, field):
    data_dir, directory = order_dir
    edit_features(directory, edit)
    with pytest.raises(FeatureError) as error:
        load("fl_order", split="train", data_dir=data_dir)
    assert isinstance(error.value, fl.InvalidArgumentError)
    assert str(directory / "features.json") in str(error.value)
    assert field in str(error.value), str(error.value)


def test_class_names_that_are_not_utf8(order_dir):
    data_dir, directory = order_dir
    (directory / "label.labels.txt").write_bytes(b"even\n\xff\xfe\n")
    with pytest.raises(FeatureError, match=r"label.labels.txt: class names that are not UTF-8"):
        load("fl_order", split="train", data_dir=data_dir)


# --------------------------------------------------------------------------- records
def build(directory, features, records, name="ds"):
    """A one-split, one-shard TFDS folder ``directory/name/1.0.0`` of ``records``."""
    folder = directory / name / "1.0.0"
    folder.mkdir(parents=True)
    (folder / "features.json").write_text(json.dumps({"featuresDict": {"features": features}}))
    (folder / "dataset_info.json").write_text(json.dumps({"name": name, "splits": [
        {"name": "train", "shardLengths": [str(len(records))]}]}))
    with fl.TFRecordWriter(str(folder / f"{name}-train.tfrecord-00000-of-00001")) as writer:
        for record in records:
            writer.write(record)
    return folder


ZLIB = {"x": {"tensor": {"dtype": "int16", "encoding": "zlib",
                         "shape": {"dimensions": ["-1", "2"]}}}}


def test_a_damaged_zlib_tensor_names_the_dataset(tmp_path):
    good = zlib.compress(np.arange(4, dtype=np.int16).tobytes())
    folder = build(tmp_path, ZLIB, [fl.encode_example({"x": [good]}),
                                    fl.encode_example({"x": [good[:-3] + b"\0\0\0"]})])
    it = iter(load("ds", split="train", data_dir=tmp_path))
    assert next(it)["x"].tolist() == [[0, 1], [2, 3]]
    with pytest.raises(FeatureError, match="zlib-encoded tensor") as error:
        next(it)
    assert str(folder) in str(error.value) and "split 'train'" in str(error.value)


def test_a_zlib_bomb_is_refused_before_it_inflates(tmp_path):
    from feedline.datasets import tfds_features

    bomb = zlib.compress(b"\0" * (64 << 20), 9)  # 64 KiB inflating to 64 MiB
    build(tmp_path, ZLIB, [fl.encode_example({"x": [bomb]})])
    limit = tfds_features.MAX_DECOMPRESSED_BYTES
    tfds_features.MAX_DECOMPRESSED_BYTES = 1 << 20
    try:
        with pytest.raises(FeatureError, match="inflates to more than the 1048576 bytes"):
            list(load("ds", split="train", data_dir=tmp_path))
    finally:
        tfds_features.MAX_DECOMPRESSED_BYTES = limit


def test_bytes_of_the_wrong_size_name_the_dataset(tmp_path):
    features = {"x": {"tensor": {"dtype": "float64", "encoding": "bytes",
                                 "shape": {"dimensions": ["3"]}}}}
    folder = build(tmp_path, features, [fl.encode_example({"x": [b"\0" * 23]})])
    with pytest.raises(FeatureError, match="tensor of 23 bytes does not hold float64") as error:
        list(load("ds", split="train", data_dir=tmp_path))
    assert str(folder) in str(error.value)


def test_a_record_that_is_not_an_example_names_the_dataset(tmp_path):
    features = {"x": {"tensor": {"dtype": "int64", "shape": {}}}}
    folder = build(tmp_path, features, [b"\xff\xff\xff\xff not a proto"])
    with pytest.raises(fl.FeedlineError) as error:
        list(load("ds", split="train", data_dir=tmp_path))
    assert str(folder) in str(error.value)


def test_a_split_listed_empty_names_the_metadata(order_dir):
    data_dir, directory = order_dir  # found by the metadata fuzz target: a raw ValueError
    edit_info(directory, lambda info: train(info).update(shardLengths=["0", "0", "0", "0"]))
    with pytest.raises(fl.InvalidArgumentError, match="selects no examples") as error:
        load("fl_order", data_dir=data_dir)
    assert error.value.path == str(directory / "dataset_info.json")
