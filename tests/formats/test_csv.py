"""CsvDataset and make_csv_dataset: tf.data's semantics, errors naming file/line/column,
checkpoints."""

import csv
import gzip
import zlib

import numpy as np
import pytest

import feedline as fl
from feedline.core.iterator import IteratorContext
from feedline.formats.csv import CsvDataset, CsvError, make_csv_dataset
from feedline.testing import assert_elements_equal, check_checkpointing


def write(path, data: bytes, compression=None):
    if compression == "GZIP":
        data = gzip.compress(data)
    elif compression == "ZLIB":
        data = zlib.compress(data)
    path.write_bytes(data)
    return str(path)


def raw_iterator(ds):
    """The reader's own iterator: it goes on after an error (PipelineIterator stops)."""
    return ds._make_iterator(IteratorContext())


def drain_with_errors(iterator):
    out = []
    while True:
        try:
            out.append(next(iterator))
        except StopIteration:
            return out
        except CsvError as error:
            out.append(error)


# ------------------------------------------------------------------------------ CsvDataset
def test_tf_data_docstring_example(tmp_path):
    path = write(tmp_path / "my_file0.csv", b"abcdefg,4.28E10,5.55E6,12\nhijklmn,-5.3E14,,2\n")
    ds = CsvDataset(path, [np.float32, np.array([0.0], np.float32), np.int32],
                    select_cols=[1, 2, 3])
    assert_elements_equal(list(ds), [(np.float32(4.28e10), np.float32(5.55e6), np.int32(12)),
                                     (np.float32(-5.3e14), np.float32(0.0), np.int32(2))])


def test_column_types_and_defaults(tmp_path):
    path = write(tmp_path / "t.csv", b"1,2,3.5,4.25,text\n,,,,\n")
    defaults = [np.int32(-1), np.int64(-2), np.float32(-3), np.float64(-4), b"none"]
    assert_elements_equal(list(CsvDataset(path, defaults)), [
        (np.int32(1), np.int64(2), np.float32(3.5), np.float64(4.25), b"text"),
        (np.int32(-1), np.int64(-2), np.float32(-3), np.float64(-4), b"none")])


@pytest.mark.parametrize("spec, dtype, default", [
    (np.int32, np.int32, None), (np.dtype("int64"), np.int64, None), (bytes, object, None),
    (str, object, None), (np.array([], np.float64), np.float64, None), ([], np.float32, None),
    (7, np.int32, np.int32(7)), (2**40, np.int64, np.int64(2**40)), (1.5, np.float32, 1.5),
    ("é", object, "é".encode()), (b"\xff", object, b"\xff"), ([3], np.int32, np.int32(3)),
    (np.array([2.5]), np.float64, 2.5), (np.float64(0.25), np.float64, 0.25),
])
def test_record_defaults_follow_tf_conversion(tmp_path, spec, dtype, default):
    path = write(tmp_path / "e.csv", b"\n")
    ds = CsvDataset(path, [spec])
    assert ds.element_spec == (fl.TensorSpec((), np.dtype(dtype)),)
    if default is None:
        with pytest.raises(CsvError, match="required"):
            list(ds)
    else:
        [(value,)] = list(ds)
        assert value == default
        if dtype is object:
            assert isinstance(value, bytes)
        else:
            assert value.dtype == np.dtype(dtype)


@pytest.mark.parametrize("spec, error", [
    (int, TypeError), (np.bool_, TypeError), (True, TypeError), (np.int16, TypeError),
    ([1, 2], ValueError), (np.zeros((2, 2)), ValueError), (object(), TypeError)])
def test_bad_record_defaults(spec, error):
    with pytest.raises(error, match=r"record_defaults\[0\]"):
        CsvDataset("x.csv", [spec])


@pytest.mark.parametrize("text, dtype, ok", [
    (" 12 ", np.int32, 12), ("-7", np.int64, -7), ("+5", np.int32, None),
    ("1_000", np.int32, None), ("1.0", np.int32, None), ("2147483647", np.int32, 2147483647),
    ("2147483648", np.int32, None), ("2147483648", np.int64, 2147483648),
    ("1e5", np.float32, 1e5), (" 2.5 ", np.float64, 2.5), ("-inf", np.float32, -np.inf),
    ("1e50", np.float32, np.inf), ("1_0.5", np.float64, None), ("abc", np.float32, None)])
def test_number_parsing(tmp_path, text, dtype, ok):
    path = write(tmp_path / "n.csv", f"{text}\n".encode())
    ds = CsvDataset(path, [dtype])
    if ok is None:
        with pytest.raises(CsvError, match=f"not a valid {np.dtype(dtype).name}"):
            list(ds)
    else:
        assert list(ds) == [(dtype(ok),)]


def test_nan_is_a_float(tmp_path):
    [(value,)] = list(CsvDataset(write(tmp_path / "n.csv", b"nan\n"), [np.float32]))
    assert np.isnan(value)


def test_quoting(tmp_path):
    data = (b'"a,b","say ""hi""","multi\nline"\r\n'
            b'"",plain,"cr\rinside"\n'
            b'x,y,z')
    path = write(tmp_path / "q.csv", data)
    assert list(CsvDataset(path, [b"-"] * 3)) == [
        (b"a,b", b'say "hi"', b"multi\nline"), (b"-", b"plain", b"cr\rinside"),
        (b"x", b"y", b"z")]


def test_use_quote_delim_false(tmp_path):
    path = write(tmp_path / "q.csv", b'"a",b"c\n')
    assert list(CsvDataset(path, [b""] * 2, use_quote_delim=False)) == [(b'"a"', b'b"c')]


def test_delimiter_na_value_and_raw_bytes(tmp_path):
    path = write(tmp_path / "d.csv", b"1|NA|caf\xc3\xa9\nNA|2|\xff\xfe\n")
    ds = CsvDataset(path, [0, 0, b""], field_delim="|", na_value="NA")
    assert list(ds) == [(1, 0, "café".encode()), (0, 2, b"\xff\xfe")]
    tab = write(tmp_path / "t.tsv", b"a\tb\n")
    assert list(CsvDataset(tab, [b"", b""], field_delim=b"\t")) == [(b"a", b"b")]


def test_line_endings(tmp_path):
    path = write(tmp_path / "e.csv", b"1,a\r\n2,b\r3,c\n4,d")
    assert list(CsvDataset(path, [0, b""])) == [(1, b"a"), (2, b"b"), (3, b"c"), (4, b"d")]


def test_empty_line_is_a_record_with_one_empty_field(tmp_path):
    path = write(tmp_path / "e.csv", b"1\n\n3\n")
    assert list(CsvDataset(path, [-1])) == [(1,), (-1,), (3,)]
    two = write(tmp_path / "e2.csv", b"1,2\n\n3,4\n")
    out = drain_with_errors(raw_iterator(CsvDataset(two, [0, 0])))
    assert out[0] == (1, 2) and out[2] == (3, 4)
    assert isinstance(out[1], CsvError) and "expected 2 fields but found 1" in str(out[1])


def test_header(tmp_path):
    path = write(tmp_path / "h.csv", b'"name\nwith newline",n\nx,1\n')
    assert list(CsvDataset(path, [b"", 0], header=True)) == [(b"x", 1)]
    only_header = write(tmp_path / "oh.csv", b"a,b\n")
    assert list(CsvDataset(only_header, [b"", 0], header=True)) == []
    empty = write(tmp_path / "empty.csv", b"")
    assert list(CsvDataset(empty, [b""])) == []
    with pytest.raises(CsvError, match="empty.csv.*cannot read the header"):
        list(CsvDataset(empty, [b""], header=True))


def test_select_and_exclude_cols(tmp_path):
    path = write(tmp_path / "s.csv", b"0,1,2,3,4\n5,6,7,8,9\n")
    assert list(CsvDataset(path, [0, 0], select_cols=[1, 3])) == [(1, 3), (6, 8)]
    assert list(CsvDataset(path, [0, 0, 0], exclude_cols=[0, 2])) == [(1, 3, 4), (6, 8, 9)]
    short = write(tmp_path / "short.csv", b"0,1\n")
    with pytest.raises(CsvError, match="select_cols reads column 3"):
        list(CsvDataset(short, [0, 0], select_cols=[1, 3]))
    with pytest.raises(ValueError, match="strictly increasing"):
        CsvDataset(path, [0, 0], select_cols=[3, 1])
    with pytest.raises(ValueError, match="not both"):
        CsvDataset(path, [0, 0], select_cols=[0, 1], exclude_cols=[2])
    with pytest.raises(ValueError, match="must match"):
        CsvDataset(path, [0, 0], select_cols=[0, 1, 2])


def test_bad_field_names_file_line_and_column_and_the_next_call_goes_on(tmp_path):
    path = write(tmp_path / "bad.csv", b"h1,h2\n1,2\n3,oops\n\"multi\nline\",5\n6,7\n")
    ds = CsvDataset(path, [np.int32, np.int32], header=True)
    with pytest.raises(CsvError) as info:
        list(ds)
    error = info.value
    assert (error.path, error.line, error.column, error.record_index) == (path, 3, 1, 1)
    assert str(error) == (f"CsvDataset: {path}: line 3, column 1 (record 1): 'oops' is not a "
                          "valid int32")
    out = drain_with_errors(raw_iterator(ds))
    assert out[0] == (1, 2) and out[3] == (6, 7)
    assert isinstance(out[1], CsvError)
    assert isinstance(out[2], CsvError) and (out[2].line, out[2].column) == (4, 0)


def test_missing_required_field(tmp_path):
    path = write(tmp_path / "m.csv", b"1,\n")
    with pytest.raises(CsvError, match=r"m.csv: line 1, column 1 .*empty.*required"):
        list(CsvDataset(path, [0, np.float32]))
    na = write(tmp_path / "na.csv", b"1,?\n")
    with pytest.raises(CsvError, match="NA value"):
        list(CsvDataset(na, [0, np.float32], na_value="?"))


def test_malformed_quotes(tmp_path):
    path = write(tmp_path / "q.csv", b'1,"a"b\n2,c\n3,"never closed\n')
    out = drain_with_errors(raw_iterator(CsvDataset(path, [0, b""])))
    assert isinstance(out[0], CsvError) and out[0].line == 1
    assert out[1] == (2, b"c")
    assert isinstance(out[2], CsvError) and out[2].line == 3
    assert len(out) == 3


# Python's csv module rejects fields over csv.field_size_limit() (128 KiB by default); tf.data
# reads a 5 MiB field.
MIB = 1 << 20


def big_field(size: int, seed: int) -> bytes:
    """``size`` bytes of printable text without quotes, commas or line breaks."""
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789 ;.-", dtype=np.uint8)
    return alphabet[np.random.default_rng(seed).integers(0, len(alphabet), size)].tobytes()


def big_records() -> tuple[bytes, list[tuple]]:
    """A file with fields of 5 MiB (plain), 6 MiB (quoted, with a line break, a comma and a
    doubled quote inside) and 20 MiB, around ordinary records, and what it holds."""
    five, six, twenty = big_field(5 * MIB, 1), big_field(6 * MIB, 2), big_field(20 * MIB, 3)
    quoted = six[:100] + b'\n,""' + six[100:]
    data = (b"id,text\n1,small\n2," + five + b"\n3,\"" + quoted + b"\"\r\n4,x\n5," + twenty +
            b"\n6,last\n")
    return data, [(1, b"small"), (2, five), (3, six[:100] + b'\n,"' + six[100:]), (4, b"x"),
                  (5, twenty), (6, b"last")]


@pytest.mark.parametrize("compression, buffer_size", [(None, None), (None, 1 << 16),
                                                      ("GZIP", 1 << 20)])
@pytest.mark.slow
def test_fields_of_many_mebibytes(tmp_path, compression, buffer_size):
    data, expected = big_records()
    path = write(tmp_path / "big.csv", data, compression)
    limit = csv.field_size_limit()
    ds = CsvDataset(path, [np.int64, b""], header=True, compression_type=compression,
                    buffer_size=buffer_size)
    assert list(ds) == expected
    # The process-wide limit is lifted only while a large record is read.
    assert csv.field_size_limit() == limit == 131072
    with iter(ds) as it:
        assert [next(it) for _ in range(3)] == expected[:3]
        # Positions after the large records count their bytes and lines.
        record_3_end = data.index(b"\r\n4,") + 2
        assert it.state_dict()["root"]["position"] == {"offset": record_3_end, "line": 5,
                                                      "record": 3}


@pytest.mark.slow
def test_fields_of_many_mebibytes_checkpoint_and_parallel_reads(tmp_path):
    data, expected = big_records()
    paths = [write(tmp_path / f"{i}.csv", data) for i in range(2)]
    ds = CsvDataset(paths[0], [np.int64, b""], header=True)
    assert check_checkpointing(ds, steps=[2, 3, 5], epochs=1) == expected
    # Two files read at once, each with large fields, lift and restore the limit in turn.
    parallel = CsvDataset(paths, [np.int64, b""], header=True, num_parallel_reads=2)
    assert list(parallel) == [row for pair in zip(expected, expected) for row in pair]
    assert csv.field_size_limit() == 131072


def test_errors_in_records_with_large_fields(tmp_path):
    five = big_field(5 * MIB, 4)
    path = write(tmp_path / "bad.csv", b"1," + five + b",extra\n2,\"" + five + b"\"x\n3," + five +
                 b"\n4,\"" + five)
    out = drain_with_errors(raw_iterator(CsvDataset(path, [0, b""])))
    assert [type(item) for item in out] == [CsvError, CsvError, tuple, CsvError]
    assert str(out[0]) == f"CsvDataset: {path}: line 1 (record 0): expected 2 fields but found 3"
    assert str(out[1]) == (f"CsvDataset: {path}: line 2 (record 1): ',' expected after '\"'")
    assert out[2] == (3, five)
    assert str(out[3]) == f"CsvDataset: {path}: line 4 (record 3): unexpected end of data"
    assert csv.field_size_limit() == 131072


def test_make_csv_dataset_reads_fields_of_many_mebibytes(tmp_path):
    data, expected = big_records()
    path = write(tmp_path / "big.csv", data)
    # Header and type inference read the large fields too.
    ds = make_csv_dataset(path, batch_size=4, num_epochs=1, shuffle=False)
    batches = list(ds)
    assert [sorted(batch) for batch in batches] == [["id", "text"]] * 2
    assert [batch["id"].tolist() for batch in batches] == [[1, 2, 3, 4], [5, 6]]
    assert batches[0]["id"].dtype == np.int32 and batches[0]["text"].dtype == object
    assert [batch["text"].tolist() for batch in batches] == [
        [text for _, text in expected[:4]], [text for _, text in expected[4:]]]
    assert csv.field_size_limit() == 131072


def test_missing_file(tmp_path):
    missing = str(tmp_path / "absent.csv")
    with pytest.raises(FileNotFoundError, match="absent.csv"):
        list(CsvDataset(missing, [0]))


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_compressed(tmp_path, compression):
    path = write(tmp_path / "c.csv.z", b"a,b\n1,x\n2,y\n", compression)
    ds = CsvDataset(path, [0, b""], compression_type=compression, header=True, buffer_size=2)
    assert list(ds) == [(1, b"x"), (2, b"y")]


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_checkpointing(tmp_path, compression):
    files = [write(tmp_path / "a.csv", b'h,v\n1,"x\ny"\r\n2,z\r3,\n', compression),
             write(tmp_path / "b.csv", b"h,v\n", compression),
             write(tmp_path / "c.csv", b"h,v\n4,w", compression)]
    ds = CsvDataset(files, [0, b"-"], compression_type=compression, header=True, buffer_size=3)
    reference = check_checkpointing(ds)
    assert reference == [(1, b"x\ny"), (2, b"z"), (3, b"-"), (4, b"w")]


def test_checkpointing_dataset_of_names(tmp_path):
    names = [write(tmp_path / f"{i}.csv", b"%d,a\n%d,b\n" % (i, i)) for i in range(3)]
    check_checkpointing(CsvDataset(fl.Dataset.from_tensor_slices(names), [0, b""]))


def test_state_counts_offset_lines_and_records(tmp_path):
    path = write(tmp_path / "s.csv", b'h\n"a\nb"\nc\n')
    with iter(CsvDataset(path, [b""], header=True)) as it:
        assert next(it) == (b"a\nb",)
        assert it.state_dict()["root"]["position"] == {"offset": 8, "line": 3, "record": 1}


def test_bad_arguments():
    with pytest.raises(ValueError, match="field_delim"):
        CsvDataset("x", [0], field_delim=",,")
    with pytest.raises(ValueError, match="at least one column"):
        CsvDataset("x", [])
    with pytest.raises(TypeError, match="record_defaults must be a list"):
        CsvDataset("x", "abc")


def test_num_parallel_reads(tmp_path):
    pytest.importorskip("feedline.transforms.interleave")
    files = [write(tmp_path / f"{i}.csv", b"".join(b"%d\n" % (10 * i + j) for j in range(n)))
             for i, n in enumerate([2, 3])]
    ds = CsvDataset(files, [0], num_parallel_reads=2)
    assert [int(x) for (x,) in ds] == [0, 10, 1, 11, 12]
    check_checkpointing(ds)


# ------------------------------------------------------------------------ make_csv_dataset
def as_lists(element):
    if isinstance(element, tuple):
        return tuple(as_lists(e) for e in element)
    return {k: v.tolist() for k, v in element.items()}


def test_make_csv_dataset_infers_names_and_types(tmp_path):
    write(tmp_path / "a.csv", b"i,big,f,d,s,label\n"
                              b"1,3000000000,1.5,1e300,x,0\n"
                              b",1,,2,,1\n")
    ds = make_csv_dataset(str(tmp_path / "*.csv"), batch_size=2, label_name="label",
                          num_epochs=1, shuffle=False)
    [(features, label)] = list(ds)
    assert list(features) == ["i", "big", "f", "d", "s"]
    assert [features[k].dtype for k in ["i", "big", "f", "d"]] == \
        [np.int32, np.int64, np.float32, np.float64]
    assert as_lists(features) == {"i": [1, 0], "big": [3000000000, 1], "f": [1.5, 0.0],
                                  "d": [1e300, 2.0], "s": [b"x", b""]}
    assert features["s"].dtype == object
    assert label.tolist() == [0, 1] and label.dtype == np.int32


def test_make_csv_dataset_inference_widens_like_tf(tmp_path):
    write(tmp_path / "a.csv", b"a,b,c,d\n1,1,1,nan\n2.5,x,,1\n")
    ds = make_csv_dataset(str(tmp_path / "a.csv"), 2, num_epochs=1, shuffle=False)
    [features] = list(ds)
    # int32 then float -> float32; int32 then text -> string; nan is not < inf -> string.
    assert [features[k].dtype for k in "abcd"] == [np.float32, object, np.int32, object]
    assert as_lists(features)["b"] == [b"1", b"x"]


def test_make_csv_dataset_without_label_several_files_and_remainder(tmp_path):
    for i in range(3):
        write(tmp_path / f"{i}.csv", b"x,y\n%d,a\n%d,b\n" % (2 * i, 2 * i + 1))
    ds = make_csv_dataset(str(tmp_path / "*.csv"), batch_size=4, num_epochs=1, shuffle=False)
    batches = [as_lists(b) for b in ds]
    assert batches == [{"x": [0, 1, 2, 3], "y": [b"a", b"b", b"a", b"b"]},
                       {"x": [4, 5], "y": [b"a", b"b"]}]


def test_make_csv_dataset_forever_drops_the_remainder(tmp_path):
    write(tmp_path / "a.csv", b"x\n1\n2\n3\n")
    ds = make_csv_dataset(str(tmp_path / "a.csv"), 2, shuffle=False)
    assert ds.cardinality() in (fl.INFINITE, fl.UNKNOWN)
    assert [b["x"].tolist() for b in ds.take(4)] == [[1, 2], [3, 1], [2, 3], [1, 2]]


def test_make_csv_dataset_select_columns_and_defaults(tmp_path):
    write(tmp_path / "a.csv", b"a,b,c\n1,2,3\n4,,6\n")
    # column_defaults follow the selected columns in file order, as in tf.data.
    ds = make_csv_dataset(str(tmp_path / "a.csv"), 2, select_columns=["c", 1],
                          column_defaults=[9.0, np.int64], num_epochs=1, shuffle=False)
    [features] = list(ds)
    assert as_lists(features) == {"b": [2.0, 9.0], "c": [3, 6]}
    assert features["b"].dtype == np.float32 and features["c"].dtype == np.int64


def test_make_csv_dataset_column_names_without_header(tmp_path):
    write(tmp_path / "a.csv", b"1,2\n3,4\n")
    ds = make_csv_dataset(str(tmp_path / "a.csv"), 2, column_names=["p", "q"], header=False,
                          num_epochs=1, shuffle=False)
    assert [as_lists(b) for b in ds] == [{"p": [1, 3], "q": [2, 4]}]


def test_make_csv_dataset_shuffles_files_and_records_reproducibly(tmp_path):
    for i in range(4):
        write(tmp_path / f"{i}.csv", b"x\n" + b"".join(b"%d\n" % (10 * i + j) for j in range(5)))
    pattern = str(tmp_path / "*.csv")

    def values(seed):
        ds = make_csv_dataset(pattern, 5, num_epochs=1, shuffle_seed=seed, shuffle_buffer_size=8)
        return [v for b in ds for v in b["x"].tolist()]

    first = values(3)
    assert sorted(first) == sorted(10 * i + j for i in range(4) for j in range(5))
    assert first == values(3)
    assert first != sorted(first)


def test_make_csv_dataset_ignore_errors(tmp_path):
    write(tmp_path / "a.csv", b"x,y\n1,2\nbad,3\n4\n5,6\n")
    ds = make_csv_dataset(str(tmp_path / "a.csv"), 10, column_defaults=[0, 0], num_epochs=1,
                          shuffle=False, ignore_errors=True)
    assert [as_lists(b) for b in ds] == [{"x": [1, 5], "y": [2, 6]}]
    strict = make_csv_dataset(str(tmp_path / "a.csv"), 10, column_defaults=[0, 0],
                              num_epochs=1, shuffle=False)
    with pytest.raises(CsvError, match="line 3, column 0"):
        list(strict)


def test_make_csv_dataset_ignore_errors_with_parallel_reads(tmp_path):
    pytest.importorskip("feedline.transforms.interleave")
    write(tmp_path / "a.csv", b"x\n1\nbad\n3\n")
    write(tmp_path / "b.csv", b"x\n10\n20\n")
    ds = make_csv_dataset(str(tmp_path / "*.csv"), 10, column_defaults=[0], num_epochs=1,
                          shuffle=False, ignore_errors=True, num_parallel_reads=2)
    assert [b["x"].tolist() for b in ds] == [[1, 10, 3, 20]]


def test_make_csv_dataset_checkpointing(tmp_path):
    for i in range(2):
        write(tmp_path / f"{i}.csv", b"x,s\n" + b"".join(b"%d,v%d\n" % (j, j) for j in range(5)))
    pattern = str(tmp_path / "*.csv")
    check_checkpointing(make_csv_dataset(pattern, 3, num_epochs=1, shuffle=False))
    check_checkpointing(make_csv_dataset(pattern, 3, num_epochs=1, shuffle_seed=5,
                                         shuffle_buffer_size=4, num_parallel_reads=2))


def test_make_csv_dataset_restores_across_epochs(tmp_path):
    write(tmp_path / "a.csv", b"x\n" + b"".join(b"%d\n" % j for j in range(7)))
    ds = make_csv_dataset(str(tmp_path / "a.csv"), 3, num_epochs=3, shuffle_seed=1,
                          shuffle_buffer_size=4)
    # Pinned at epoch 0 each time: iter(ds) would go on to the shuffle's next epochs.
    with fl.PipelineIterator(ds) as it:
        reference = [b["x"].tolist() for b in it]
    assert sorted(v for b in reference for v in b) == sorted(list(range(7)) * 3)
    for k in (1, 3, 5):
        with fl.PipelineIterator(ds) as it:
            for _ in range(k):
                next(it)
            state = it.state_dict()
        with iter(ds) as restored:
            restored.load_state_dict(state)
            assert [b["x"].tolist() for b in restored] == reference[k:]


def test_make_csv_dataset_errors(tmp_path):
    write(tmp_path / "a.csv", b"x,y\n1,2\n")
    write(tmp_path / "b.csv", b"x,z\n1,2\n")
    write(tmp_path / "dup.csv", b"x,x\n1,2\n")
    with pytest.raises(ValueError, match="no files match|matched no files|No files"):
        make_csv_dataset(str(tmp_path / "*.tsv"), 2)
    with pytest.raises(ValueError, match="different column names"):
        make_csv_dataset([str(tmp_path / "a.csv"), str(tmp_path / "b.csv")], 2)
    with pytest.raises(ValueError, match="duplicate column names"):
        make_csv_dataset(str(tmp_path / "dup.csv"), 2)
    with pytest.raises(ValueError, match="label_name 'w'"):
        make_csv_dataset(str(tmp_path / "a.csv"), 2, label_name="w")
    with pytest.raises(ValueError, match="column_names is needed"):
        make_csv_dataset(str(tmp_path / "a.csv"), 2, header=False)
    with pytest.raises(ValueError, match="select_columns"):
        make_csv_dataset(str(tmp_path / "a.csv"), 2, select_columns=["nope"])
    with pytest.raises(ValueError, match="batch_size"):
        make_csv_dataset(str(tmp_path / "a.csv"), 0)


@pytest.mark.parametrize("data, line, record, problem", [
    (b"a,b\n1,2\n\"x\"y,3\n", 3, 1, "expected after"),  # bad quoting while inferring
    (b"\"a\"b,c\n1,2\n", 1, 0, "expected after"),  # bad quoting in the header
    (b"a,a\n1,2\n", 1, 0, "duplicate column names"),  # the header names a column twice
    (b"a,b\n1,2\n3\n", 3, 1, "has 1 fields, expected 2"),  # a short record while inferring
    (b"", 1, 0, "no header row"),
    (b"\n1,2\n", 1, 0, "names no columns"),  # an empty first line
])
def test_make_csv_dataset_damaged_files_are_csv_errors_naming_file_and_line(
        tmp_path, data, line, record, problem):
    # Found by fuzzing: the header and the inference pass raised csv.Error itself, or a
    # ValueError without the line.
    path = str(tmp_path / "a.csv")
    write(tmp_path / "a.csv", data)
    with pytest.raises(CsvError, match=problem) as info:
        make_csv_dataset(path, 2, num_epochs=1, shuffle=False)
    error = info.value
    assert isinstance(error, ValueError)
    assert (error.path, error.line, error.record_index) == (path, line, record)
    assert f"{path}: line {line}" in str(error)


def test_the_field_limit_that_decides_is_the_normal_one_while_another_reader_lifts_it():
    # A record that failed under the normal limit is read again, even if another reader
    # thread has lifted the limit by the time this one decides (the check used to read the
    # lifted limit and call the record a genuine error).
    import threading

    from feedline.formats.csv import records as feedline_csv

    normal = csv.field_size_limit()
    inside, leave = threading.Event(), threading.Event()

    def other_reader():
        with feedline_csv._unlimited_fields():
            inside.set()
            leave.wait(timeout=60)

    thread = threading.Thread(target=other_reader)
    thread.start()
    try:
        assert inside.wait(timeout=60)
        assert csv.field_size_limit() > normal
        assert feedline_csv._field_limit() == normal
    finally:
        leave.set()
        thread.join()
    assert csv.field_size_limit() == normal == feedline_csv._field_limit()


def test_fingerprints_and_pickles_name_the_classes_as_before_the_package_split():
    # Checkpoints and cache files carry these digests (computed before feedline/formats/csv
    # became a package); pickles name the classes by the same module.
    import pickle

    import fsspec

    from feedline.core.fingerprint import PipelineFingerprint

    fsspec.filesystem("memory").pipe("/pin/a.csv", b"x,y,name\n1,2.5,a\n")
    plain = fl.CsvDataset("memory://pin/a.csv", [np.int64, 0.0, b""], header=True)
    made = make_csv_dataset("memory://pin/*.csv", 2, label_name="name", shuffle=False,
                            num_epochs=1, ignore_errors=True)
    assert PipelineFingerprint.of(plain).digest == "34c0942b481ea1d7"
    # Changed once when feedline's own functions began to count by name, not code, and once
    # when an object array of str given to from_tensor_slices began to hold bytes (issue 26:
    # tf.data's strings; make_csv_dataset's file names).
    assert PipelineFingerprint.of(made).digest == "3390427b1b2a66ad"
    assert b"feedline.formats.csv.dataset" not in pickle.dumps(plain)
    assert [tuple(x) for x in pickle.loads(pickle.dumps(plain))] == [(1, 2.5, b"a")]
    assert CsvError.__module__ == CsvDataset.__module__ == "feedline.formats.csv"
