"""HuggingFaceDataset: folders and files written by ``datasets`` itself, read without it."""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.distribute.autoshard import plan_sharding
from feedline.testing import check_checkpointing

pa = pytest.importorskip("pyarrow")

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "huggingface"
EXPECTED = json.loads((GOLDEN / "expected.json").read_text())


def plain(value):
    """A feedline value in the form expected.json holds what ``datasets`` gave."""
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None  # a null float is NaN here, None in datasets
    return value


def expected(name):
    def text_as_hex(value):  # datasets gives str, feedline bytes
        if isinstance(value, str):
            return {"hex": value.encode().hex()}
        if isinstance(value, dict) and set(value) != {"hex"}:
            return {k: text_as_hex(v) for k, v in value.items()}
        if isinstance(value, list):
            return [text_as_hex(v) for v in value]
        return value

    return [text_as_hex(row) for row in EXPECTED[name]]


def test_dataset_dict_single_dataset_and_cache_files_read_as_datasets_reads_them():
    for name, ds in [("train", fl.HuggingFaceDataset(str(GOLDEN / "dict"), split="train")),
                     ("test", fl.HuggingFaceDataset(str(GOLDEN / "dict"), "test")),
                     ("test", fl.HuggingFaceDataset(str(GOLDEN / "single"))),
                     ("cache", fl.HuggingFaceDataset(str(GOLDEN / "cache.arrow"))),
                     ("parquet", fl.HuggingFaceDataset(str(GOLDEN / "cache.parquet")))]:
        assert [plain(row) for row in ds] == expected(name), name
        assert [plain(ds[i]) for i in range(len(ds))] == expected(name), name


def test_value_types():
    row = fl.HuggingFaceDataset(str(GOLDEN / "dict"), split="train")[1]
    assert list(row) == list(EXPECTED["features"])
    assert type(row["id"]) is np.int64 and type(row["score"]) is np.float32
    assert type(row["small"]) is np.int8 and type(row["flag"]) is np.bool_
    assert row["text"] == "row 1 é".encode() and row["label"] == 1
    assert row["vector"].dtype == np.float32 and row["vector"].tolist() == [0.0]
    assert row["tokens"].dtype == object and row["tokens"].tolist() == [b"t0", b"t1"]
    assert row["meta"] == {"source": b"s1", "year": np.int32(2001)}
    assert row["grid"].dtype == np.int32 and row["grid"].tolist() == [[1, 2, 3], [4, 5, 6]]
    assert set(row["image"]) == {"bytes", "path"} and row["image"]["path"] is None
    first = fl.HuggingFaceDataset(str(GOLDEN / "dict"), split="train")[0]
    assert np.isnan(first["maybe"]) and first["vector"].shape == (0,)
    row["grid"][0, 0] = 99  # elements are values: writable, and nobody else sees it
    assert fl.HuggingFaceDataset(str(GOLDEN / "dict"), split="train")[1]["grid"][0, 0] == 1


def test_features_info_and_class_names():
    ds = fl.HuggingFaceDataset(str(GOLDEN / "dict"), split="train")
    assert ds.features == EXPECTED["features"]
    assert ds.features["label"]["names"] == ["cat", "dog", "bird"]
    assert ds.info["features"] == EXPECTED["features"]


def test_columns_batches_and_decoded_images():
    ds = fl.HuggingFaceDataset(str(GOLDEN / "dict"), split="train", columns=["label", "id"])
    batch = next(iter(ds.batch(4)))
    assert list(batch) == ["label", "id"] and batch["id"].tolist() == [0, 1, 2, 3]
    images = fl.HuggingFaceDataset(str(GOLDEN / "dict"), split="train", columns=["image"],
                                   decode_images=True)
    for i, row in enumerate(images):
        np.testing.assert_array_equal(row["image"], np.array(EXPECTED["images"][str(i)],
                                                             np.uint8))
    with pytest.raises(ValueError, match=r"has no column\(s\) \['nope'\]"):
        list(fl.HuggingFaceDataset(str(GOLDEN / "single"), columns=["nope"]))


def test_random_access_global_shuffle_and_sharding():
    ds = fl.HuggingFaceDataset(str(GOLDEN / "dict"), split="train", columns=["id"])
    assert len(ds) == 7 and int(ds[-1]["id"]) == 6 and int(ds[3]["id"]) == 3  # across files
    order = [int(i) for i in fl.Dataset.range(7).global_shuffle(seed=5)]
    assert [int(r["id"]) for r in ds.global_shuffle(seed=5)] == order
    assert plan_sharding(ds.global_shuffle(seed=5), 2).policy == "index"
    plan = plan_sharding(ds, 2)
    assert (plan.policy, plan.files) == ("file", 2)


def test_checkpointing():
    ds = fl.HuggingFaceDataset(str(GOLDEN / "dict"), split="train", block_size=3)
    check_checkpointing(ds)
    check_checkpointing(ds.global_shuffle(seed=1).batch(3), epochs=1)


def test_state_is_file_and_row():
    with iter(fl.HuggingFaceDataset(str(GOLDEN / "dict"), split="train")) as it:
        for _ in range(5):
            next(it)
        state = it.state_dict()["root"]
    # 7 rows in 2 shards: 4 then 3.
    assert (state["file_index"], state["position"]) == (1, {"row": 1})


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_worker_processes():
    def make() -> fl.Dataset:  # a first iteration (epoch 0) of its own objects each time
        ds = fl.HuggingFaceDataset(str(GOLDEN / "dict"), split="train", columns=["id"])
        return ds.global_shuffle(seed=3).map(lambda r: r["id"]).batch(2)

    assert [b.tolist() for b in make().multiprocess(2)] == [b.tolist() for b in make()]


def test_cache_folder_by_split(tmp_path):
    shutil.copy(GOLDEN / "cache.arrow", tmp_path / "mnist-train-00000-of-00002.arrow")
    shutil.copy(GOLDEN / "dict" / "test" / "data-00000-of-00001.arrow",
                tmp_path / "mnist-train-00001-of-00002.arrow")
    shutil.copy(GOLDEN / "cache.parquet", tmp_path / "mnist-test.parquet")
    train = fl.HuggingFaceDataset(str(tmp_path), split="train", columns=["id"])
    assert [int(r["id"]) for r in train] == [200, 201, 202, 203, 100, 101, 102]
    test = fl.HuggingFaceDataset(str(tmp_path), split="test", columns=["id"])
    assert [int(r["id"]) for r in test] == [200, 201, 202, 203]
    with pytest.raises(ValueError, match=r"cache folder with splits \['test', 'train'\]; "
                                         "pass split="):
        fl.HuggingFaceDataset(str(tmp_path))


def test_remote_files_through_fsspec():
    import fsspec

    fs = fsspec.filesystem("memory")
    for path in (GOLDEN / "single").iterdir():
        fs.pipe(f"/hf-test/single/{path.name}", path.read_bytes())
    ds = fl.HuggingFaceDataset("memory://hf-test/single")
    assert [plain(r) for r in ds] == expected("test")
    assert int(ds[2]["id"]) == 102


def test_bad_input_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        fl.HuggingFaceDataset(str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match=r"DatasetDict with splits \['train', 'test'\]; pass "
                                         "split="):
        fl.HuggingFaceDataset(str(GOLDEN / "dict"))
    with pytest.raises(ValueError, match="it has no split 'validation'"):
        fl.HuggingFaceDataset(str(GOLDEN / "dict"), split="validation")
    with pytest.raises(ValueError, match="is not a saved Hugging Face dataset"):
        fl.HuggingFaceDataset(str(tmp_path))
    junk = tmp_path / "junk.arrow"
    junk.write_bytes(b"not arrow at all" * 10)
    with pytest.raises(fl.DataLossError, match="cannot read .*junk.arrow as an Arrow file"):
        fl.HuggingFaceDataset(str(junk))[0]
    it = fl.HuggingFaceDataset([str(junk), str(GOLDEN / "cache.arrow")], columns=["id"]
                               )._make_iterator(IteratorContext())
    with pytest.raises(fl.DataLossError, match="junk.arrow"):
        next(it)
    assert [int(r["id"]) for r in it] == [200, 201, 202, 203]  # the next file follows
    it.close()
    truncated = tmp_path / "truncated.arrow"
    truncated.write_bytes((GOLDEN / "cache.arrow").read_bytes()[:1500])
    with pytest.raises(fl.DataLossError, match="truncated.arrow"):
        list(fl.HuggingFaceDataset(str(truncated)))
    with pytest.raises(ValueError, match="a list of files has none"):
        fl.HuggingFaceDataset([str(junk)], split="train")
    with pytest.raises(TypeError, match="list of column names"):
        fl.HuggingFaceDataset(str(GOLDEN / "single"), columns="id")


def test_without_pyarrow_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"pip install feedline\[parquet\]"):
        fl.HuggingFaceDataset(str(GOLDEN / "single"))


def test_nulls_are_none_except_in_float_columns(tmp_path):
    import pyarrow.parquet as pq

    path = str(tmp_path / "nulls.parquet")
    pq.write_table(pa.table({"i": [1, None], "b": [None, True], "s": ["x", None],
                             "l": [[1, 2], None], "f": [None, 0.5]}), path)
    first, second = list(fl.HuggingFaceDataset(path))
    assert (first["i"], first["b"], first["s"], first["l"].tolist()) == (1, None, b"x", [1, 2])
    assert (second["i"], second["b"], second["s"], second["l"]) == (None, True, None, None)
    assert np.isnan(first["f"]) and second["f"] == 0.5
