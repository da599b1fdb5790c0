"""Functions are bound when the pipeline is built, as tf.data traces them at map() time."""

# ruff: noqa: B023 - closures over loop variables are what these tests are about

from __future__ import annotations

import numpy as np

import feedline as fl


def test_the_text_tutorials_labeler_labels_each_file_with_its_own_index():
    # tf.data's "Load text" tutorial: for i, f in enumerate(files): lines(f).map(labeler(i)).
    datasets = []
    for i, words in enumerate([[b"a", b"b"], [b"c"], [b"d", b"e"]]):
        datasets.append(fl.Dataset.from_tensor_slices(np.array(words, dtype=object))
                        .map(lambda line: (line, np.int64(i))))
    ds = datasets[0].concatenate(datasets[1]).concatenate(datasets[2])
    assert [(line, int(label)) for line, label in ds] == [
        (b"a", 0), (b"b", 0), (b"c", 1), (b"d", 2), (b"e", 2)]


def test_every_stage_that_takes_a_function_binds_it():
    def build():
        ds = []
        for k in range(2):
            ds.append(fl.Dataset.range(6)
                      .filter(lambda x: x % 2 == k)
                      .flat_map(lambda x: fl.Dataset.from_tensors(x * 10 + k))
                      .interleave(lambda x: fl.Dataset.range(1).map(lambda _: x + k),
                                  cycle_length=1)
                      .scan(np.int64(0), lambda s, x: (s + k, x))
                      .take_while(lambda x: x < 100 + k)
                      .map(lambda x: x * (k + 1), num_parallel_calls=2))
        return ds
    even, odd = build()
    assert [int(x) for x in even] == [0, 20, 40]
    assert [int(x) for x in odd] == [2 * 12, 2 * 32, 2 * 52]


def test_group_by_window_binds_its_functions():
    datasets = []
    for size in (2, 3):
        datasets.append(fl.Dataset.range(6).group_by_window(
            key_func=lambda x: np.int64(0), reduce_func=lambda key, w: w.batch(size),
            window_size_func=lambda key: np.int64(size)))
    assert [b.tolist() for b in datasets[0]] == [[0, 1], [2, 3], [4, 5]]
    assert [b.tolist() for b in datasets[1]] == [[0, 1, 2], [3, 4, 5]]


def test_a_late_bound_function_reads_its_variables_when_it_runs():
    def build():
        offset = 1
        early = fl.Dataset.range(3).map(lambda x: x + offset)
        late = fl.Dataset.range(3).map(fl.late_bound(lambda x: x + offset))
        offset = 100
        return early, late
    early, late = build()
    assert [int(x) for x in early] == [1, 2, 3]
    assert [int(x) for x in late] == [100, 101, 102]


def test_bound_variables_are_the_same_objects_read_when_the_function_runs():
    seen: list[int] = []

    def build():
        sink = seen
        return fl.Dataset.range(3).map(lambda x: sink.append(int(x)) or x)
    assert [int(x) for x in build()] == [0, 1, 2]
    assert seen == [0, 1, 2]  # the list itself, not a copy of it


def test_a_bound_closure_runs_in_worker_processes():
    maps = [fl.Dataset.range(8).map(lambda x: x * k, num_parallel_calls=2, executor="process")
            for k in (2, 3)]
    assert [int(x) for x in maps[0]] == [2 * i for i in range(8)]
    assert [int(x) for x in maps[1]] == [3 * i for i in range(8)]
