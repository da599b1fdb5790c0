"""StoreWriter: frames compress while the round fills, rounds are written two at a time and
recorded in order."""

import concurrent.futures
import json

import numpy as np

import feedline as fl
from feedline.snapshot.store import StoreWriter
from feedline.testing.elements import assert_elements_equal


def element(i):
    return {"x": np.full(70_000, i, dtype=np.int32), "i": np.int64(i)}  # 280 KB: own frame


def test_a_full_frame_starts_compressing_before_its_round_is_committed(tmp_path):
    writer = StoreWriter(str(tmp_path), "ZSTD", {"kind": "test"}, progress_bar=False)
    try:
        assert not writer.add(element(0))
        [frame] = writer._chunks[0].frames
        assert isinstance(frame, concurrent.futures.Future)  # submitted to the pool at once
        packed = frame.result()
        assert (packed.elements, packed.raw) == (1, writer._buffered_bytes)
        assert packed.packed < packed.raw
    finally:
        writer.close()


def test_rounds_in_flight_are_recorded_in_order_and_on_close(tmp_path):
    writer = StoreWriter(str(tmp_path), "NONE", {"kind": "test"}, round_bytes=1,
                         progress_bar=False)
    try:
        for i in range(5):
            assert writer.add(element(i))  # every element fills a round
            writer.commit({"after": i})
            assert len(writer._pending) <= writer.rounds_in_flight == 2
            assert writer.elements == i + 1
            if i >= 2:  # recorded rounds are a prefix, each with its own state
                progress = json.loads((tmp_path / "progress.json").read_text())
                assert progress["rounds"] == i - 1
                assert progress["input_state"] == {"after": i - 2}
    finally:
        writer.close()
    progress = json.loads((tmp_path / "progress.json").read_text())
    assert (progress["rounds"], progress["elements"], progress["input_state"]) == \
        (5, 5, {"after": 4})
    assert progress["shards"] == {"0": 5}


def test_resuming_after_rounds_in_flight_reads_back_exactly(tmp_path):
    identity = {"kind": "test"}
    writer = StoreWriter(str(tmp_path), "ZSTD", identity, round_bytes=300_000,
                         progress_bar=False)
    for i in range(4):
        if writer.add(element(i)):
            writer.commit({"next": i + 1})
    writer.add(element(4))  # buffered only: dropped on close, never half-written
    writer.close()
    again = StoreWriter(str(tmp_path), "ZSTD", identity, round_bytes=300_000,
                        progress_bar=False)
    assert again.resume_state == {"next": 4} and again.elements == 4
    for i in range(again.resume_state["next"], 6):
        if again.add(element(i)):
            again.commit({"next": i + 1})
    again.finish({"cardinality": again.elements})
    assert_elements_equal(list(fl.Dataset.load(str(tmp_path))), [element(i) for i in range(6)])
