"""multiprocess() moved to ``feedline.placement``: its fingerprint, and so the checkpoints
saved before the move, stay valid."""

from __future__ import annotations

import pytest

import feedline as fl

QUICK = fl.Options(threading=fl.ThreadingOptions(close_timeout=0.5))

# Saved by feedline at a5d4e3b (MultiprocessDataset in feedline.transforms.multiprocess) from
# fl.Dataset.range(12).multiprocess(2).batch(2) after two batches.
OLD_STATE = {
    "feedline_iterator": 2,
    "pipeline": {"digest": "65d1cbe771f36df7", "stages": [
        ["RangeDataset(dtype=dtype('int64'), range=range(0, 12))", "1de62f7f358caed0"],
        ["MultiprocessDataset(num_workers=2)", "f1c7ff3cfcceb40a"],
        ["BatchDataset(batch_size=2, drop_remainder=False)", "65d1cbe771f36df7"]]},
    "root": {"type": "batch", "version": 2, "at": 2, "next": 2, "done": [], "errors": [],
             "input": {"type": "multiprocess", "version": 1, "epoch": 0, "num_workers": 2,
                       "next_worker": 0, "ended": [False, False], "workers": [
                           {"at": 1, "next": 2, "done": [], "errors": [], "input": {
                               "type": "ShardIterator", "version": 1, "position": 1,
                               "input": {"type": "RangeIterator", "version": 1,
                                         "position": 1}}},
                           {"at": 1, "next": 2, "done": [], "errors": [], "input": {
                               "type": "ShardIterator", "version": 1, "position": 2,
                               "input": {"type": "RangeIterator", "version": 1,
                                         "position": 2}}}]}},
    "checksum": "crc32c:32ef1a14"}


def test_multiprocess_keeps_its_fingerprint_across_the_move():
    # The fingerprint named the stage's class by module: moving MultiprocessDataset to
    # feedline.placement changed it, and every checkpoint of a pipeline with multiprocess()
    # was refused ("saved from a different pipeline: ... has MultiprocessDataset(num_workers=2)
    # where this one has MultiprocessDataset(num_workers=2)").
    from feedline.core.fingerprint import PipelineFingerprint

    ds = fl.Dataset.range(12).multiprocess(2).batch(2)
    assert PipelineFingerprint.of(ds).digest == OLD_STATE["pipeline"]["digest"]


@pytest.mark.timeout(120)
@pytest.mark.slow
def test_a_multiprocess_checkpoint_saved_before_the_move_restores():
    ds = fl.Dataset.range(12).multiprocess(2).batch(2).with_options(QUICK)
    with iter(ds) as it:
        it.load_state_dict(OLD_STATE)
        assert [batch.tolist() for batch in it] == [[4, 5], [6, 7], [8, 9], [10, 11]]
