"""HuggingFaceDataset on damaged input: a DataLossError naming the file and where, never a
crash, a raw error or a silently shorter dataset (issue 41, defects 1, 2 and 5)."""

import json
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import feedline as fl

pa = pytest.importorskip("pyarrow")

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "huggingface"
EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def text_table(rows: int = 100) -> "pa.Table":
    return pa.table({"text": [f"row {i} é" for i in range(rows)], "id": list(range(rows))})


def write_stream(path: Path, table: "pa.Table", batch: int = 10) -> list[int]:
    """Writes ``table`` as an Arrow stream; returns the byte offset where each batch ends."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table, max_chunksize=batch)
    source = pa.memory_map(str(path))
    reader = pa.ipc.open_stream(source)
    ends = []
    for _ in reader:
        ends.append(source.tell())
    return ends


@pytest.mark.timeout(120)
def test_a_damaged_string_offset_is_a_data_loss_error_not_a_crash(tmp_path):
    path = tmp_path / "s.arrow"
    write_stream(path, text_table())
    data = bytearray(path.read_bytes())
    # The offsets of batch 3's strings ("row 30 é" ... are 9 bytes each): corrupt the third.
    at = data.index(struct.pack("<3i", 0, 9, 18), data.index(b"row 29") + 9)
    data[at + 8:at + 12] = struct.pack("<i", 1 << 30)
    path.write_bytes(bytes(data))
    # In a child: before the fix, converting the rows read far out of bounds (exit 139).
    script = textwrap.dedent(f"""
        import feedline as fl
        for read in (lambda ds: list(ds), lambda ds: ds[35], lambda ds: list(ds.global_shuffle(1))):
            try:
                read(fl.HuggingFaceDataset({str(path)!r}))
            except fl.DataLossError as error:
                print(repr((str(error), error.path, error.offset, error.record_index)))
            else:
                print("no error")
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=100)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and "no error" not in lines, done.stdout
    for line in lines:
        message, where, offset, row = eval(line)  # noqa: S307 - our own repr
        assert where == str(path) and row == 30 and offset > 0
        assert "record batch 3 (rows 30 to 39, at byte" in message and "s.arrow" in message
    # Rows before the damage are delivered, in order, before the error.
    it = iter(fl.HuggingFaceDataset(str(path), block_size=10))
    assert [int(next(it)["id"]) for _ in range(30)] == list(range(30))
    with pytest.raises(fl.DataLossError, match="record batch 3"):
        next(it)


def test_validation_covers_the_columns_read(tmp_path):
    path = tmp_path / "s.arrow"
    write_stream(path, text_table())
    data = bytearray(path.read_bytes())
    at = data.index(struct.pack("<3i", 0, 8, 16))
    data[at + 8:at + 12] = struct.pack("<i", 1 << 30)
    path.write_bytes(bytes(data))
    # The damaged text column is not read: the ids are whole and delivered.
    assert [int(r["id"]) for r in fl.HuggingFaceDataset(str(path), columns=["id"])] \
        == list(range(100))


@pytest.mark.slow
def test_a_stream_cut_at_a_record_batch_boundary_is_truncated(tmp_path):
    whole = tmp_path / "whole.arrow"
    ends = write_stream(whole, text_table())
    data = whole.read_bytes()
    assert data.endswith(EOS) and len(data) == ends[-1] + len(EOS)
    cut = tmp_path / "cut.arrow"
    for batches, end in enumerate(ends, start=1):
        cut.write_bytes(data[:end])
        with pytest.raises(fl.DataLossError, match=rf"cut.arrow is truncated: its Arrow stream "
                           rf"ends after record batch {batches - 1} \({batches * 10} rows\)"):
            list(fl.HuggingFaceDataset(str(cut)))
        with pytest.raises(fl.DataLossError, match="truncated"):
            len(fl.HuggingFaceDataset(str(cut)))
    # Every other cut is an error too.
    for end in range(0, len(data), 7):
        cut.write_bytes(data[:end])
        with pytest.raises(fl.DataLossError, match="cut.arrow"):
            list(fl.HuggingFaceDataset(str(cut)))


def test_an_arrow_file_without_its_footer_is_truncated(tmp_path):
    path = tmp_path / "f.arrow"
    table = text_table()
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
        out.write_table(table, max_chunksize=10)
    data = path.read_bytes()
    assert [int(r["id"]) for r in fl.HuggingFaceDataset(str(path))] == list(range(100))
    for end in (len(data) - 1, len(data) - 100, len(data) // 2, 10):
        path.write_bytes(data[:end])
        with pytest.raises(fl.DataLossError, match="f.arrow is truncated: it starts as an "
                                                   "Arrow file but does not end with"):
            list(fl.HuggingFaceDataset(str(path)))


def saved_folder(tmp_path: Path, num_examples: int, kind: str = "saved") -> Path:
    """The golden 3-row ``single/`` folder, its dataset_info.json giving ``num_examples``
    for split ``test``; as a save_to_disk folder or as a cache folder."""
    folder = tmp_path / kind
    info = json.loads((GOLDEN / "single" / "dataset_info.json").read_text())
    info["splits"] = {"test": {"name": "test", "num_bytes": 1, "num_examples": num_examples,
                               "dataset_name": "golden"}}
    if kind == "saved":
        shutil.copytree(GOLDEN / "single", folder)
        state = json.loads((folder / "state.json").read_text())
        state["_split"] = "test"
        (folder / "state.json").write_text(json.dumps(state))
    else:
        folder.mkdir(parents=True)
        shutil.copy(GOLDEN / "single" / "data-00000-of-00001.arrow", folder / "golden-test.arrow")
    (folder / "dataset_info.json").write_text(json.dumps(info))
    return folder


def test_rows_disagreeing_with_dataset_info_are_named(tmp_path):
    agrees = saved_folder(tmp_path / "a", 3)
    assert len(list(fl.HuggingFaceDataset(str(agrees)))) == 3
    folder = saved_folder(tmp_path / "b", 1000)
    with pytest.raises(fl.DataLossError, match=r"hold 3 rows of split 'test', but its "
                                               r"dataset_info.json says 1000"):
        fl.HuggingFaceDataset(str(folder), check_row_count=True)
    # A save_to_disk folder keeps the count of the dataset a filter started from: a warning
    # by default, nothing when the check is off.
    with pytest.warns(RuntimeWarning, match="hold 3 rows .* says 1000.*filter/select/map"):
        assert len(list(fl.HuggingFaceDataset(str(folder)))) == 3
    assert len(list(fl.HuggingFaceDataset(str(folder), check_row_count=False))) == 3
    # A cache folder's count is the builder's own: an error by default.
    cache = saved_folder(tmp_path / "c", 1000, kind="cache")
    with pytest.raises(fl.DataLossError, match="hold 3 rows .* says 1000"):
        fl.HuggingFaceDataset(str(cache), split="test")
    assert len(list(fl.HuggingFaceDataset(str(saved_folder(tmp_path / "d", 3, "cache")),
                                          split="test"))) == 3


def test_a_cut_stream_in_a_folder_with_counts_is_truncated(tmp_path):
    folder = saved_folder(tmp_path, 3)
    data = folder / "data-00000-of-00001.arrow"
    data.write_bytes(data.read_bytes()[:-len(EOS)])
    with pytest.raises(fl.DataLossError, match="data-00000-of-00001.arrow is truncated"):
        list(fl.HuggingFaceDataset(str(folder)))


def test_damaged_metadata_files_are_named(tmp_path):
    folder = tmp_path / "single"
    shutil.copytree(GOLDEN / "single", folder)
    state = folder / "state.json"
    for content, match in [
            ("[1, 2]", "state file .*state.json holds a JSON list, not an object"),
            ('{"_data_files": [{"filename": "../../etc/passwd"}]}',
             "_data_files entry 0 is .*not .*a file name in its folder"),
            ('{"_data_files": [7]}', "_data_files entry 0 is 7"),
            ('{"_data_files": ', "state.json is not valid JSON")]:
        state.write_text(content)
        with pytest.raises(fl.DataLossError, match=match):
            fl.HuggingFaceDataset(str(folder))
    shutil.copy(GOLDEN / "single" / "state.json", state)
    (folder / "dataset_info.json").write_text('"just a string"')
    with pytest.raises(fl.DataLossError, match="dataset_info.json holds a JSON str"):
        fl.HuggingFaceDataset(str(folder))


def test_junk_and_features_that_do_not_fit_are_data_loss_errors(tmp_path):
    junk = tmp_path / "junk.arrow"
    junk.write_bytes(b"\xff\xff\xff\xff\x10\x00\x00\x00" + bytes(range(40)))
    with pytest.raises(fl.DataLossError, match="junk.arrow"):  # was a raw OSError
        list(fl.HuggingFaceDataset(str(junk)))
    table = pa.table({"grid": pa.array([[1, 2, 3]], pa.list_(pa.int32()))})
    features = {"grid": {"shape": [2, 2], "dtype": "int32", "_type": "Array2D"}}
    table = table.replace_schema_metadata(
        {"huggingface": json.dumps({"info": {"features": features}})})
    path = tmp_path / "grid.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    with pytest.raises(fl.DataLossError, match="column 'grid' of .*grid.arrow does not convert"):
        list(fl.HuggingFaceDataset(str(path)))
    # Metadata that is not a mapping is ignored, as when there is none.
    odd = table.replace_schema_metadata({"huggingface": "[1]"})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, odd.schema) as out:
        out.write_table(odd)
    assert fl.HuggingFaceDataset(str(path))[0]["grid"].tolist() == [1, 2, 3]


def test_random_access_takes_across_batches_in_order(tmp_path):
    path = tmp_path / "s.arrow"
    write_stream(path, text_table(), batch=7)
    ds = fl.HuggingFaceDataset(str(path))
    order = np.random.default_rng(0).permutation(100)
    from feedline.formats.huggingface import HuggingFaceRandomReader

    with HuggingFaceRandomReader([str(path), str(path)], ["id"]) as reader:
        got = reader.get_many(np.concatenate([order, order + 100]))
    assert [int(r["id"]) for r in got] == order.tolist() * 2
    assert ds[99]["text"] == "row 99 é".encode()


def test_a_column_name_that_is_not_utf8_is_a_data_loss_error(tmp_path):
    path = tmp_path / "names.arrow"
    table = pa.table({"qqqq": [1, 2], "s": pa.array([{"rrrr": 1}, {"rrrr": 2}])})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as out:
        out.write_table(table)
    data = path.read_bytes()
    for name in (b"qqqq", b"rrrr"):  # a column, a field of a struct column
        path.write_bytes(data.replace(name, name[:1] + b"\xff" + name[2:]))
        with pytest.raises(fl.DataLossError, match="names.arrow is damaged: a column name in "
                                                   "its schema is not UTF-8"):
            list(fl.HuggingFaceDataset(str(path)))  # was a raw UnicodeDecodeError
