"""The dispatcher's bookkeeping (jobs, splits, journal) and split planning, without Ray."""

import json
import sys
import threading

import numpy as np
import pytest

import feedline as fl
from feedline.core.errors import ServiceError
from feedline.service.jobs import JobTable
from feedline.service.journal import JOURNAL_FILE, Journal
from feedline.service.ray_support import import_ray
from feedline.service.splits import Part, count_splits, part_dataset
from feedline.service.worker import _Buffer


def _create(table, splits=4, key="job"):
    return table.create(key, "distributed_epoch", splits, None, ["w0", "w1"], None)


def test_splits_are_handed_out_once_each_then_none():
    table = JobTable()
    job = _create(table)
    answers = [table.next_split(job, "a", 1), table.next_split(job, "b", 1),
               table.next_split(job, "a", 2), table.next_split(job, "b", 2),
               table.next_split(job, "a", 3)]
    assert answers == [[0, 0], [1, 0], [2, 0], [3, 0], None]


def test_a_repeated_request_gets_the_same_answer():
    table = JobTable()
    job = _create(table)
    assert table.next_split(job, "a", 7) == [0, 0]
    assert table.next_split(job, "a", 7) == [0, 0]  # the first answer was lost
    assert table.next_split(job, "a", 8) == [1, 0]


def test_released_splits_resume_after_what_was_handed_out():
    table = JobTable()
    job = _create(table, splits=3)
    for request in range(3):
        table.next_split(job, "a", request)
    table.split_done(job, 0)
    table.release(job, "a", {1: 5})  # split 2 not listed: nothing of it was handed out
    assert table.next_split(job, "b", 0) == [2, 0]
    assert table.next_split(job, "b", 1) == [1, 5]
    assert table.next_split(job, "b", 2) is None
    assert table.jobs[job].done == {0}


def test_a_split_done_after_its_release_is_not_handed_out_again():
    table = JobTable()
    job = _create(table, splits=1)
    table.next_split(job, "a", 0)
    table.release(job, "a", {})
    table.split_done(job, 0)
    assert table.next_split(job, "b", 0) is None


def test_a_restored_position_skips_done_splits_and_resumes_partial_ones_first():
    table = JobTable()
    job = table.create("job", "distributed_epoch", 4, None, ["w0"],
                       {"done": [0], "partial": {"3": 2}})
    answers = [table.next_split(job, "a", request) for request in range(4)]
    assert answers == [[3, 2], [1, 0], [2, 0], None]


def test_consumers_sharing_a_job_must_agree_on_how_it_runs():
    table = JobTable()
    _create(table, splits=4)
    assert _create(table, splits=4) == 0
    with pytest.raises(ServiceError, match="4 splits.*5 splits"):
        _create(table, splits=5)


def test_the_journal_brings_a_new_table_to_the_same_state(tmp_path):
    table = JobTable(Journal(tmp_path))
    job = _create(table, splits=4)
    table.set_workers(["w0", "w1", "w2"])
    table.next_split(job, "a", 1)
    table.next_split(job, "a", 2)
    table.split_done(job, 0)
    table.release(job, "a", {1: 3})
    again = JobTable(Journal(tmp_path))
    assert again.workers == ["w0", "w1", "w2"]
    assert again.jobs[job].done == {0}
    assert again.next_split(job, "a", 2) == [1, 0]  # request 2 was answered before
    assert again.next_split(job, "b", 1) == [1, 3]
    assert [again.next_split(job, "b", r) for r in (2, 3, 4)] == [[2, 0], [3, 0], None]


def test_a_last_line_cut_short_by_a_crash_is_ignored(tmp_path):
    journal = Journal(tmp_path)
    journal.append({"op": "workers", "workers": ["w0"]})
    with open(tmp_path / JOURNAL_FILE, "ab") as file:
        file.write(b'{"op": "work')
    assert list(Journal(tmp_path).replay()) == [{"op": "workers", "workers": ["w0"]}]
    again = Journal(tmp_path)  # the next dispatcher appends after the last whole line
    list(again.replay())
    again.append({"op": "workers", "workers": ["w1"]})
    assert [e["workers"] for e in Journal(tmp_path).replay()] == [["w0"], ["w1"]]


def test_a_damaged_line_inside_the_journal_is_an_error_naming_it(tmp_path):
    (tmp_path / JOURNAL_FILE).write_text('{"op": "workers", "workers": []}\nnot json\n'
                                         + json.dumps({"op": "workers", "workers": []}) + "\n")
    with pytest.raises(ServiceError, match=r"journal.jsonl: line 2 is not a journal event"):
        JobTable(Journal(tmp_path))


_CREATE = {"op": "create", "job": 0, "key": "k", "mode": "distributed_epoch", "num_splits": 2,
           "num_consumers": None, "workers": ["w0"], "position": None}


@pytest.mark.parametrize(("line", "expected"), [
    ({"op": "done", "job": 999, "split": 0},
     "'done' event of job 999, which no earlier line creates"),
    ({"op": "assign", "job": 0, "request": 1, "split": 0},
     "'assign' event without 'consumer' (expected a consumer name (a string))"),
    ({"op": "assign", "job": 0, "consumer": "a", "request": 1, "split": "0"},
     "'assign' event's 'split' is '0' (expected a split number (an int >= 0))"),
    ({"op": "assign", "job": 0, "consumer": "a", "request": 1, "split": 5},
     "'assign' event of split 5 of job 0, which is not pending there (expected one of [0, 1])"),
    ({"op": "done", "job": 0, "split": 2}, "'done' event of split 2 of job 0, which has 2 splits"),
    ({"op": "release", "job": 0, "consumer": "a", "partial": {"one": 3}},
     """'release' event's 'partial' is {'one': 3} (expected {"split": items}"""),
    ({"op": "release", "job": 0, "consumer": "a", "partial": {"1": 3}},
     "'release' event giving back split 1 of job 0, which is not assigned to consumer 'a'"),
    ({"op": "release", "job": 0, "consumer": "a", "partial": {}, "time": "noon"},
     "'release' event's 'time' is 'noon' (expected a Unix time)"),
    ({**_CREATE, "num_splits": -1},
     "'create' event's 'num_splits' is -1 (expected a number of splits (an int >= 0))"),
    ({**_CREATE, "position": {"done": [0], "partial": {"1": "x"}}},
     "'create' event's 'position' is {'done': [0], 'partial': {'1': 'x'}} (expected null or"),
    (_CREATE, "a 'create' event of job 0, which an earlier line created"),
    ({"op": "resize", "job": 0}, "unknown journal event 'resize' (expected one of assign, "),
    ({"workers": ["w1"]}, 'is not a journal event (expected a JSON object with a string "op"'),
    ([1, 2],
     """is not a journal event (expected a JSON object with a string "op", got '[1, 2]')"""),
    ("[" * 100_000 + "]" * 100_000, "is not a journal event (expected one JSON object per line"),
])
def test_a_damaged_or_crafted_journal_is_an_error_naming_the_file_line_and_expectation(
        tmp_path, line, expected):
    text = line if isinstance(line, str) else json.dumps(line)
    (tmp_path / JOURNAL_FILE).write_text(f"{json.dumps(_CREATE)}\n{text}\n"
                                         '{"op": "workers", "workers": ["w0"]}\n')
    with pytest.raises(ServiceError) as caught:
        JobTable(Journal(tmp_path))
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / JOURNAL_FILE}: line 2")
    assert expected in message, message
    assert message.endswith("; the dispatcher cannot recover its state from this journal")


def test_a_request_that_could_not_be_replayed_is_refused_before_it_is_journaled(tmp_path):
    table = JobTable(Journal(tmp_path))
    job = _create(table, splits=2)
    with pytest.raises(ServiceError, match="job 0 has splits 0 to 1, not 2"):
        table.split_done(job, 2)
    with pytest.raises(ServiceError, match="'create' event's 'position' is"):
        table.create("other", "distributed_epoch", 2, None, ["w0"], {"done": ["0"]})
    again = JobTable(Journal(tmp_path))  # what was journaled still replays
    assert sorted(again.jobs) == [job] and again.jobs[job].done == set()


def test_splits_of_a_pass_together_give_every_element_once():
    ds = fl.Dataset.range(23).map(lambda x: x * 3)
    splits = count_splits(ds, None, 2)
    assert splits == 8
    elements = [int(x) for split in range(splits)
                for x in part_dataset(ds, Part(splits, split))]
    assert sorted(elements) == [x * 3 for x in range(23)]


def test_splits_of_a_batched_pipeline_are_whole_global_batches():
    ds = fl.Dataset.range(10).map(lambda x: x + 1).batch(4)
    assert count_splits(ds, None, 4) == 3  # no more splits than batches
    batches = [b.tolist() for split in range(3) for b in part_dataset(ds, Part(3, split))]
    assert sorted(batches) == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]


def test_a_pipeline_reading_files_has_one_split_per_file(tmp_path):
    paths = []
    for index in range(3):
        path = str(tmp_path / f"part-{index}.tfrecord")
        fl.write_tfrecord(fl.Dataset.from_tensor_slices([f"{index}-{n}".encode()
                                                         for n in range(2)]), path)
        paths.append(path)
    ds = fl.TFRecordDataset(paths)
    assert count_splits(ds, None, 8) == 3
    assert [r.decode() for r in part_dataset(ds, Part(3, 2))] == ["2-0", "2-1"]
    with pytest.raises(ValueError, match="num_splits=4 but the pipeline reads only 3 files"):
        count_splits(ds, 4, 8)


def test_a_pipeline_that_cannot_be_split_is_refused_with_the_way_out():
    with pytest.raises(ValueError, match="after distribute\\(\\), or use processing_mode="
                                         "'parallel_epochs'"):
        count_splits(fl.Dataset.range(10).take(5), None, 2)
    with pytest.raises(ValueError, match="num_splits must be a positive int"):
        count_splits(fl.Dataset.range(10), 0, 2)


def test_a_missing_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install 'feedline\[service\]'"):
        import_ray()


@pytest.mark.parametrize(("arguments", "message"), [
    (("epochs", "auto"), "processing_mode must be one of"),
    (("parallel_epochs", "auto", "job", 0, None), "need both consumer_index and num_consumers"),
    (("distributed_epoch", "auto", "job", 0, 2), "need processing_mode='parallel_epochs'"),
    (("parallel_epochs", "auto", None, 0, 2), "need a job_name"),
    (("parallel_epochs", "auto", "job", 2, 2), r"consumer_index must be in \[0, 2\)"),
])
def test_distribute_refuses_bad_arguments(arguments, message):
    with pytest.raises(ValueError, match=message):
        fl.service.distribute(*arguments)


def test_distribute_refuses_a_service_that_is_not_one():
    with pytest.raises(TypeError, match="service must be a feedline.service.LocalCluster"):
        fl.service.distribute("parallel_epochs", 3)
    with pytest.raises(ValueError, match="compression must be"):
        fl.service.distribute("parallel_epochs", "auto", compression="snappy")


def test_a_task_buffer_holds_at_most_its_bytes_but_always_one_item():
    buffer = _Buffer(capacity=10, max_bytes=100)
    big = ("value", np.zeros(200, np.uint8))
    assert buffer.put(big)  # one item always fits, however big
    blocked = threading.Thread(target=lambda: results.append(buffer.put(("value", b"x"))))
    results: list[bool] = []
    blocked.start()
    blocked.join(timeout=0.2)
    assert blocked.is_alive()  # full in bytes: the producer waits
    assert buffer.take(10, wait=0)[0] == [big]
    blocked.join(timeout=10)
    assert not blocked.is_alive() and results == [True]
    assert buffer.take(10, wait=0) == ([("value", b"x")], False)
    buffer.end()
    assert buffer.take(10, wait=0) == ([], True)


def test_a_stopped_task_buffer_releases_its_waiting_producer():
    buffer = _Buffer(capacity=1, max_bytes=10**6)
    buffer.put(("value", 1))
    results: list[bool] = []
    blocked = threading.Thread(target=lambda: results.append(buffer.put(("value", 2))))
    blocked.start()
    buffer.stop()
    blocked.join(timeout=10)
    assert not blocked.is_alive() and results == [False]


def test_the_oldest_idle_jobs_are_forgotten_beyond_the_kept_number(monkeypatch):
    monkeypatch.setattr("feedline.service.jobs.KEPT_JOBS", 3)
    table = JobTable()
    busy = _create(table, key="busy")
    table.next_split(busy, "a", 0)  # a consumer reads a split of it: never forgotten
    for index in range(4):
        _create(table, key=f"pass-{index}")
    assert sorted(job.key for job in table.jobs.values()) == ["busy", "pass-2", "pass-3"]
    with pytest.raises(ServiceError, match="has no job 1"):
        table.next_split(1, "b", 0)


def test_a_finished_job_its_consumers_left_is_over_after_the_grace_period(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("feedline.service.jobs.time.time", lambda: clock[0])
    table = JobTable(job_gc_seconds=60)
    job = table.create("train/0", "distributed_epoch", 1, None, ["w0"], None, "a")
    assert table.next_split(job, "a", 0) == [0, 0]
    table.split_done(job, 0)
    table.release(job, "a", {})
    clock[0] += 30  # a trainer joining the pass its peer just finished gets nothing twice
    late = table.create("train/0", "distributed_epoch", 1, None, ["w0"], None, "b")
    assert late == job and table.next_split(late, "b", 0) is None
    table.release(late, "b", {})
    clock[0] += 61  # the run started again with the same name gets its data
    again = table.create("train/0", "distributed_epoch", 1, None, ["w0"], None, "c")
    assert again != job and table.next_split(again, "c", 0) == [0, 0]


def test_a_job_a_consumer_still_reads_is_never_over(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("feedline.service.jobs.time.time", lambda: clock[0])
    table = JobTable(job_gc_seconds=0)
    job = table.create("shared/0", "parallel_epochs", 0, None, ["w0"], None, "a")
    table.create("shared/0", "parallel_epochs", 0, None, ["w0"], None, "b")
    table.release(job, "a", {})
    clock[0] += 10
    assert table.create("shared/0", "parallel_epochs", 0, None, ["w0"], None, "c") == job
