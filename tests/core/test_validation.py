"""Integer arguments everywhere: NumPy integers and 0-d arrays accepted (stored as plain ints),
bools and floats refused naming the argument, negative counts as tf.data reads them."""

import json

import numpy as np
import pytest

import feedline as fl
from feedline.core.validation import (
    as_int,
    resolve_parallelism,
    schedulable_cpus,
    validate_count,
    validate_int,
    validate_optional_int,
    validate_parallelism,
    validate_seed,
)


def ints(ds):
    return [int(x) for x in ds]


X = np.array([7, 8], np.int32)


# ------------------------------------------------------------------ the validators
@pytest.mark.parametrize("value", [3, np.int8(3), np.uint64(3), np.int64(3), np.array(3),
                                   np.array(3, np.uint16)])
def test_as_int_accepts_integers_and_returns_a_plain_int(value):
    out = as_int(value, "f(n)")
    assert out == 3 and type(out) is int


@pytest.mark.parametrize("value, message", [
    (True, r"f\(n\) must be an integer, not a bool: got True \(bool\)"),
    (np.True_, r"f\(n\) must be an integer, not a bool"),
    (np.array(False), r"f\(n\) must be an integer, not a bool"),
    (1.5, r"f\(n\) must be an integer .* got 1.5 \(float\)"),
    (2.0, r"f\(n\) must be an integer .* got 2.0 \(float\)"),
    (np.float32(2), r"f\(n\) must be an integer .*float32"),
    (np.array(2.0), r"f\(n\) must be an integer .*ndarray"),
    (np.array([2]), r"f\(n\) must be an integer .*ndarray"),
    ("2", r"f\(n\) must be an integer .* got '2' \(str\)"),
    (None, r"f\(n\) must be an integer .*NoneType"),
])
def test_as_int_refuses_bools_floats_and_the_rest(value, message):
    with pytest.raises(TypeError, match=message):
        as_int(value, "f(n)")


def test_range_checks_and_special_values():
    assert validate_int(np.int64(0), "f(n)", minimum=0) == 0
    with pytest.raises(ValueError, match=r"f\(n\) must be >= 1, got 0"):
        validate_int(0, "f(n)", minimum=1)
    assert validate_int(-1, "f(n)", minimum=0, special=(-1,)) == -1
    assert validate_optional_int(None, "f(n)", minimum=1) is None
    assert validate_count(np.int64(-9), "take(count)") == -1
    assert validate_count(np.array(5), "take(count)") == 5
    assert validate_seed(np.uint32(5), "s") == 5 and validate_seed(None, "s") is None
    with pytest.raises(TypeError, match=r"shuffle\(seed\) must be an int or None, got 1.0"):
        validate_seed(1.0, "shuffle(seed)")
    assert validate_parallelism(np.array(fl.AUTOTUNE), "p") == fl.AUTOTUNE
    assert validate_parallelism(None, "p") is None
    with pytest.raises(ValueError, match="None, AUTOTUNE or a positive int, got -2"):
        validate_parallelism(-2, "p")
    with pytest.raises(TypeError, match=r"map\(num_parallel_calls\)"):
        validate_parallelism(True, "map(num_parallel_calls)")


def test_parallelism_and_cpu_helpers_live_in_core():
    from feedline.core.iterator import IteratorContext

    ctx = IteratorContext(options=fl.Options(autotune=fl.AutotuneOptions(cpu_budget=1)))
    assert resolve_parallelism(fl.AUTOTUNE, ctx) == 1 and resolve_parallelism(3, ctx) == 3
    assert schedulable_cpus() >= 1
    # The iterators' imports keep working where they were.
    from feedline.transforms.interleave import schedulable_cpus as from_interleave

    assert from_interleave is schedulable_cpus


# ------------------------------------------------------------------ everyday tf.data code
# Elements are NumPy values, so a count taken from an element is an np.int64.
def test_counts_from_elements_inside_flat_map():
    def through(op):
        return ints(fl.Dataset.range(4).flat_map(lambda n: op(fl.Dataset.range(10, 13), n)))

    assert through(lambda d, n: d.repeat(n)) == [10, 11, 12, 10, 11, 12, 10, 11, 12,
                                                 10, 11, 12, 10, 11, 12, 10, 11, 12]
    assert through(lambda d, n: d.take(n)) == [10, 10, 11, 10, 11, 12]
    assert through(lambda d, n: d.skip(n)) == [10, 11, 12, 11, 12, 12]
    assert through(lambda d, n: d.prefetch(n)) == [10, 11, 12] * 4
    assert through(lambda d, n: d.batch(n + 1).map(lambda b: b.sum())) == \
        [10, 11, 12, 21, 12, 33, 33]
    assert through(lambda d, n: d.shuffle(n + 1, seed=n).take(0)) == []
    out = ints(fl.Dataset.range(3).flat_map(lambda n: fl.Dataset.from_tensors(X).repeat(n)
                                            .map(lambda x: x[0])))
    assert out == [7, 7, 7]


def test_counts_from_elements_for_parallel_stages():
    ds = fl.Dataset.range(1, 4).flat_map(
        lambda n: fl.Dataset.range(5).map(lambda x: x * n, num_parallel_calls=n))
    assert ints(ds) == [0, 1, 2, 3, 4, 0, 2, 4, 6, 8, 0, 3, 6, 9, 12]
    ds = fl.Dataset.range(2, 3).flat_map(
        lambda n: fl.Dataset.range(1, 4).interleave(
            lambda x: fl.Dataset.from_tensors(x).repeat(3), cycle_length=n, block_length=n - 1,
            num_parallel_calls=n))
    assert ints(ds) == [1, 2, 1, 2, 1, 2, 3, 3, 3]
    ds = fl.Dataset.range(2, 3).flat_map(
        lambda n: fl.Dataset.range(6).batch(n, num_parallel_calls=n).map(lambda b: b.tolist()[0]))
    assert ints(ds) == [0, 2, 4]


def test_negative_counts_follow_tf_data():
    three = fl.Dataset.range(3)
    # repeat: any negative count repeats forever.
    ds = three.repeat(np.int64(-2))
    assert ds.cardinality() == fl.INFINITE and ints(ds.take(7)) == [0, 1, 2, 0, 1, 2, 0]
    # take: any negative count takes all; skip: any negative count skips everything.
    assert ints(three.take(-2)) == [0, 1, 2] and three.take(-2).cardinality() == 3
    assert ints(three.skip(-2)) == [] and three.skip(-2).cardinality() == 0
    assert three.repeat().take(-5).cardinality() == fl.INFINITE
    assert three.repeat().skip(-5).cardinality() == fl.INFINITE
    # The stored count is tf.data's canonical -1 whatever negative value was given.
    assert three.take(-7).count == three.skip(-7).count == three.repeat(-7).count == -1


# ------------------------------------------------------------------ every integer argument
def _file_readers():
    return [
        ("TFRecordDataset(buffer_size)",
         lambda v: fl.TFRecordDataset("x.tfrecord", buffer_size=v), "buffer_size", 3),
        ("TFRecordDataset(num_parallel_reads)",
         lambda v: fl.TFRecordDataset(["a", "b"], num_parallel_reads=v), "num_parallel_reads", 2),
        ("TextLineDataset(buffer_size)",
         lambda v: fl.TextLineDataset("x.txt", buffer_size=v), "buffer_size", 3),
        ("TextLineDataset(num_parallel_reads)",
         lambda v: fl.TextLineDataset(["a", "b"], num_parallel_reads=v), "num_parallel_reads",
         2),
        ("FixedLengthRecordDataset(record_bytes)",
         lambda v: fl.FixedLengthRecordDataset("x", v), "record_bytes", 3),
        ("FixedLengthRecordDataset(header_bytes)",
         lambda v: fl.FixedLengthRecordDataset("x", 2, header_bytes=v), "header_bytes", 3),
        ("FixedLengthRecordDataset(footer_bytes)",
         lambda v: fl.FixedLengthRecordDataset("x", 2, footer_bytes=v), "footer_bytes", 3),
        ("FixedLengthRecordDataset(buffer_size)",
         lambda v: fl.FixedLengthRecordDataset("x", 2, buffer_size=v), "buffer_size", 3),
        ("CsvDataset(buffer_size)",
         lambda v: fl.CsvDataset("x.csv", [0], buffer_size=v), "buffer_size", 3),
        ("ParquetDataset(batch_size)",
         lambda v: fl.ParquetDataset("x.parquet", batch_size=v), "batch_size", 3),
    ]


ARGUMENTS = [
    ("take(count)", lambda v: fl.Dataset.range(9).take(v), "count", 3),
    ("skip(count)", lambda v: fl.Dataset.range(9).skip(v), "count", 3),
    ("repeat(count)", lambda v: fl.Dataset.range(9).repeat(v), "count", 3),
    ("batch(batch_size)", lambda v: fl.Dataset.range(9).batch(v), "batch_size", 3),
    ("batch(num_parallel_calls)", lambda v: fl.Dataset.range(9).batch(2, num_parallel_calls=v),
     "num_parallel_calls", 3),
    ("padded_batch(batch_size)", lambda v: fl.Dataset.range(9).padded_batch(v), "batch_size", 3),
    ("rebatch(batch_size)", lambda v: fl.Dataset.range(9).batch(2).rebatch(v),
     lambda ds: ds.batch_sizes[0], 3),
    ("prefetch(buffer_size)", lambda v: fl.Dataset.range(9).prefetch(v), "buffer_size", 3),
    ("shuffle(buffer_size)", lambda v: fl.Dataset.range(9).shuffle(v), "buffer_size", 3),
    ("shuffle(seed)", lambda v: fl.Dataset.range(9).shuffle(2, seed=v), "seed", 3),
    ("map(num_parallel_calls)", lambda v: fl.Dataset.range(9).map(abs, num_parallel_calls=v),
     "num_parallel_calls", 3),
    ("interleave(cycle_length)",
     lambda v: fl.Dataset.range(9).interleave(fl.Dataset.range, cycle_length=v),
     "cycle_length", 3),
    ("interleave(block_length)",
     lambda v: fl.Dataset.range(9).interleave(fl.Dataset.range, 2, block_length=v),
     "block_length", 3),
    ("interleave(num_parallel_calls)",
     lambda v: fl.Dataset.range(9).interleave(fl.Dataset.range, 2, num_parallel_calls=v),
     "num_parallel_calls", 3),
    ("shard(num_shards)", lambda v: fl.Dataset.range(9).shard(v, 0), "num_shards", 3),
    ("shard(index)", lambda v: fl.Dataset.range(9).shard(4, v), "index", 3),
    ("window(size)", lambda v: fl.Dataset.range(9).window(v), "size", 3),
    ("window(shift)", lambda v: fl.Dataset.range(9).window(2, shift=v), "shift", 3),
    ("window(stride)", lambda v: fl.Dataset.range(9).window(2, stride=v), "stride", 3),
    ("enumerate(start)", lambda v: fl.Dataset.range(9).enumerate(v), "start", 3),
    ("range(stop)", lambda v: fl.Dataset.range(v), lambda ds: ds.range.stop, 3),
    ("range(step)", lambda v: fl.Dataset.range(0, 9, v), lambda ds: ds.range.step, 3),
    ("random(seed)", lambda v: fl.Dataset.random(seed=v), "seed", 3),
    ("sample_from_datasets(seed)",
     lambda v: fl.Dataset.sample_from_datasets([fl.Dataset.range(2)], seed=v), "seed", 3),
    *_file_readers(),
]


def _stored(ds, attribute):
    return attribute(ds) if callable(attribute) else getattr(ds, attribute)


@pytest.mark.parametrize("what, build, attribute, value", ARGUMENTS,
                         ids=[a[0] for a in ARGUMENTS])
@pytest.mark.parametrize("kind", [np.int64, np.int32, np.uint8, np.array])
def test_numpy_integers_are_accepted_and_stored_as_plain_ints(what, build, attribute, value,
                                                              kind):
    stored = _stored(build(kind(value)), attribute)
    assert stored == value and type(stored) is int
    json.dumps(stored)  # what states and fingerprints are made of


@pytest.mark.parametrize("what, build, attribute, value", ARGUMENTS,
                         ids=[a[0] for a in ARGUMENTS])
@pytest.mark.parametrize("bad", [True, 2.0, np.float64(2.5), np.array(2.0)])
def test_bools_and_floats_are_refused_naming_the_argument(what, build, attribute, value, bad):
    name = what.replace("(", r"\(").replace(")", r"\)")
    with pytest.raises(TypeError, match=name):
        build(bad)


def test_numpy_arguments_give_the_same_elements_as_ints():
    def pipeline(k):
        return (fl.Dataset.range(k * 10).shuffle(k, seed=k).batch(k).unbatch()
                .window(k, shift=k - 1, stride=k - 2).flat_map(lambda w: w.batch(k)).take(k)
                .enumerate(k).map(lambda i, b: (i, b.tolist()), num_parallel_calls=k))

    expected = [(int(i), b.tolist()) for i, b in pipeline(3)]
    assert expected == [(int(i), b.tolist()) for i, b in pipeline(np.int64(3))]
    assert expected == [(int(i), b.tolist()) for i, b in pipeline(np.array(3))]
    it = iter(pipeline(np.int64(3)))
    next(it)
    json.dumps(it.state_dict())


def test_padded_shapes_accept_numpy_dims():
    ds = fl.Dataset.range(1, 4).map(lambda n: np.arange(n))
    for shape in ([np.int64(4)], np.array([4]), np.int64(4), np.array(4), (np.array(4),)):
        batches = [b.tolist() for b in ds.padded_batch(np.int64(2), padded_shapes=shape)]
        assert batches == [[[0, 0, 0, 0], [0, 1, 0, 0]], [[0, 1, 2, 0]]]
    with pytest.raises(ValueError, match="invalid dimension 2.5"):
        list(ds.padded_batch(2, padded_shapes=[2.5]))


def test_make_csv_dataset_and_csv_columns_accept_numpy_integers(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("x,y\n1,2\n3,4\n5,6\n")
    ds = fl.make_csv_dataset(str(path), np.int64(2), num_epochs=np.int64(1), shuffle=False,
                             num_parallel_reads=np.array(2), prefetch_buffer_size=np.int32(1),
                             select_columns=[np.int64(1)], num_rows_for_inference=np.int64(2))
    assert [b["y"].tolist() for b in ds] == [[2, 4], [6]]
    with pytest.raises(TypeError, match=r"make_csv_dataset\(batch_size\)"):
        fl.make_csv_dataset(str(path), 2.0)
    with pytest.raises(TypeError, match=r"make_csv_dataset\(num_epochs\)"):
        fl.make_csv_dataset(str(path), 2, num_epochs=1.0)
    rows = fl.CsvDataset(str(path), [0], header=True, select_cols=np.array([1]))
    assert [int(y) for (y,) in rows] == [2, 4, 6]
    with pytest.raises(TypeError, match=r"select_cols\[0\]"):
        fl.CsvDataset(str(path), [0], select_cols=[1.5])
