"""ParquetDataset: row groups as dicts of NumPy columns, re-chunking, checkpoints, errors."""

import sys

import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.formats.parquet import ParquetDataset
from feedline.testing import assert_elements_equal, check_checkpointing

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def write(path, table, row_group_size=None, groups=None):
    """Write ``table`` with ``row_group_size`` rows per group, or the given row counts."""
    if groups is None:
        pq.write_table(table, str(path), row_group_size=row_group_size)
    else:
        with pq.ParquetWriter(str(path), table.schema) as writer:
            start = 0
            for count in groups:
                writer.write_table(table.slice(start, count))
                start += count
    return str(path)


def numbers(n, start=0):
    return pa.table({"i": pa.array(range(start, start + n), pa.int64()),
                     "f": pa.array([v / 2 for v in range(start, start + n)], pa.float32())})


def test_one_element_per_row_group(tmp_path):
    path = write(tmp_path / "a.parquet", numbers(5), row_group_size=2)
    out = list(ParquetDataset(path))
    assert_elements_equal(out, [
        {"i": np.array([0, 1]), "f": np.array([0, 0.5], np.float32)},
        {"i": np.array([2, 3]), "f": np.array([1, 1.5], np.float32)},
        {"i": np.array([4]), "f": np.array([2], np.float32)}])
    assert list(out[0]) == ["i", "f"]


def test_types_strings_binary_bool_dictionary_and_nulls(tmp_path):
    table = pa.table({
        "s": pa.array(["a", "é", None]),
        "b": pa.array([b"\x00\xff", b"", b"z"], pa.binary()),
        "t": pa.array([True, False, True]),
        "d": pa.array(["x", "y", "x"]).dictionary_encode(),
        "n": pa.array([1, None, 3], pa.int32()),
        "g": pa.array([1.5, None, 2.5], pa.float64()),
    })
    [batch] = list(ParquetDataset(write(tmp_path / "t.parquet", table)))
    assert batch["s"].dtype == object and batch["s"].tolist() == [b"a", "é".encode(), None]
    assert batch["b"].tolist() == [b"\x00\xff", b"", b"z"]
    assert batch["t"].dtype == np.bool_ and batch["t"].tolist() == [True, False, True]
    assert batch["d"].tolist() == [b"x", b"y", b"x"]
    assert batch["n"].dtype == np.float64 and np.isnan(batch["n"][1])  # pyarrow's rule
    assert np.isnan(batch["g"][1]) and batch["g"][0] == 1.5


def test_columns_select_and_order(tmp_path):
    path = write(tmp_path / "a.parquet", numbers(3))
    [batch] = list(ParquetDataset(path, columns=["f", "i"]))
    assert list(batch) == ["f", "i"]
    with pytest.raises(ValueError, match=r"a.parquet has no column\(s\) \['nope'\]"):
        list(ParquetDataset(path, columns=["i", "nope"]))
    with pytest.raises(TypeError, match="list of column names"):
        ParquetDataset(path, columns="i")


def test_batch_size_rechunks_rows_within_each_file(tmp_path):
    a = write(tmp_path / "a.parquet", numbers(7), groups=[3, 0, 4])
    b = write(tmp_path / "b.parquet", numbers(2, start=100), row_group_size=1)
    ds = ParquetDataset([a, b], columns=["i"], batch_size=3)
    assert [x["i"].tolist() for x in ds] == [[0, 1, 2], [3, 4, 5], [6], [100, 101]]
    assert [x["i"].tolist() for x in ParquetDataset([a, b], ["i"])] == \
        [[0, 1, 2], [3, 4, 5, 6], [100], [101]]  # the empty row group is skipped


def test_dataset_of_names_and_cardinality(tmp_path):
    names = [write(tmp_path / f"{k}.parquet", numbers(2, start=10 * k)) for k in range(3)]
    ds = ParquetDataset(fl.Dataset.from_tensor_slices(names), ["i"])
    assert [x["i"].tolist() for x in ds] == [[0, 1], [10, 11], [20, 21]]
    assert ds.cardinality() == fl.UNKNOWN


@pytest.mark.parametrize("batch_size", [None, 2, 4])
def test_checkpointing(tmp_path, batch_size):
    a = write(tmp_path / "a.parquet", numbers(5), groups=[2, 3])
    b = write(tmp_path / "b.parquet", numbers(3, start=50), row_group_size=2)
    check_checkpointing(ParquetDataset([a, b], batch_size=batch_size))


def test_state_is_file_row_group_and_row(tmp_path):
    path = write(tmp_path / "a.parquet", numbers(5), groups=[3, 2])
    with iter(ParquetDataset(path, batch_size=2)) as it:
        next(it), next(it)
        state = it.state_dict()["root"]
    assert (state["file_index"], state["position"]) == (0, {"row_group": 1, "row": 1})


def test_feeds_unbatch(tmp_path):
    path = write(tmp_path / "a.parquet", numbers(3), row_group_size=2)
    rows = list(ParquetDataset(path, ["i"]).unbatch())
    assert [int(r["i"]) for r in rows] == [0, 1, 2]


def test_missing_and_damaged_files(tmp_path):
    missing = str(tmp_path / "missing.parquet")
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        list(ParquetDataset(missing))
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"this is not parquet at all")
    good = write(tmp_path / "good.parquet", numbers(1))
    it = ParquetDataset([str(junk), good], ["i"])._make_iterator(IteratorContext())
    with pytest.raises(fl.DataLossError, match="junk.parquet") as info:
        next(it)
    assert info.value.path == str(junk)
    assert [x["i"].tolist() for x in it] == [[0]]  # the next call goes on with the next file
    it.close()


def test_bad_batch_size(tmp_path):
    with pytest.raises(ValueError, match="batch_size"):
        ParquetDataset("x.parquet", batch_size=0)


def test_without_pyarrow_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match=r"pip install feedline\[parquet\]"):
        ParquetDataset("x.parquet")


def test_a_damaged_footer_is_a_data_loss_error_naming_the_file(tmp_path):
    import struct

    path = tmp_path / "damaged.parquet"
    pq.write_table(pa.table({"x": list(range(10)), "s": [str(i) for i in range(10)]}),
                   str(path))
    data = bytearray(path.read_bytes())
    footer = len(data) - 8 - struct.unpack("<i", data[-8:-4])[0]
    data[footer] = 0xFF  # Thrift that does not parse: pyarrow raised a plain OSError
    path.write_bytes(bytes(data))
    with pytest.raises(fl.DataLossError, match="cannot read the footer of .*damaged.parquet: "
                                               "Couldn't deserialize thrift") as caught:
        list(fl.ParquetDataset(str(path)))
    assert caught.value.path == str(path)
    # A column it lacks is the caller's mistake: an InvalidArgumentError (a ValueError).
    whole = write(tmp_path / "whole.parquet", pa.table({"x": [1]}))
    with pytest.raises(fl.InvalidArgumentError, match=r"has no column\(s\) \['nope'\]"):
        list(fl.ParquetDataset(whole, columns=["nope"]))


def test_a_column_name_that_is_not_utf8_is_a_data_loss_error(tmp_path):
    path = tmp_path / "names.parquet"
    pq.write_table(pa.table({"qqqq": [1, 2]}), str(path), store_schema=False)
    path.write_bytes(path.read_bytes().replace(b"qqqq", b"q\xffqq"))
    with pytest.raises(fl.DataLossError, match="names.parquet: 'utf-8' codec can't decode"):
        list(fl.ParquetDataset(str(path)))  # was a raw UnicodeDecodeError
