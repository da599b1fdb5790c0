"""Checkpoint size per replica of the chess pipeline, and of its re-deal to other counts.

``python -m benchmarks.elastic_state_size [--records 80000] [--files 16] [--buffer 10000]``

Four replicas each run ``files.shard(4, i) -> interleave(TFRecordDataset) -> shuffle(buffer)
-> batch(512) -> map(transform) -> prefetch`` (the chess workload, :mod:`feedline.demo.chess`)
for 20 batches, save their states, and the states are re-dealt to 2 and 8 replicas
(:func:`feedline.merge_states`). Printed per replica: bytes of the state as JSON, the
shuffle stage's share of them (its buffer and positions), bytes ``fl.save_state`` writes
(binary leaves, no base64), the seconds the merge took, and the seconds a restore takes to
its first batch. Saved states hold the shuffle buffer by position (numbers read again on
restore); the same run with the buffer by value is printed beside them, and merged states
hold the dealt elements by value.
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
import time

import feedline as fl
from feedline.demo.chess import transform, write_records
from feedline.transforms import shuffle

REPLICAS = 4
BATCH = 512
BATCHES_BEFORE_CHECKPOINT = 20


def replica(files: list[str], buffer: int, num_replicas: int, index: int) -> fl.Dataset:
    return (fl.Dataset.from_tensor_slices(files).shard(num_replicas, index)
            .interleave(fl.TFRecordDataset, cycle_length=4, num_parallel_calls=4)
            .shuffle(buffer, seed=1).batch(BATCH).map(transform).prefetch(2))


def _size(state: dict) -> int:
    return len(json.dumps(state, separators=(",", ":")))


def _buffer_size(state: dict) -> int:
    node = state["root"]
    while node.get("type") != "ShuffleIterator":
        node = node["input"]
    return _size(node["buffer"]) + _size(node["positions"])


def _checkpoint(build, by_value: bool) -> list[dict]:
    """Each replica's state after ``BATCHES_BEFORE_CHECKPOINT`` batches."""
    saved_limit = shuffle.MAX_REPLAY_SECONDS
    shuffle.MAX_REPLAY_SECONDS = -1.0 if by_value else saved_limit
    try:
        states = []
        for i in range(REPLICAS):
            with iter(build(REPLICAS, i)) as it:
                for _ in range(BATCHES_BEFORE_CHECKPOINT):
                    next(it)
                states.append(it.state_dict())
        return states
    finally:
        shuffle.MAX_REPLAY_SECONDS = saved_limit


def _restore_seconds(build, states: list[dict]) -> float:
    """Seconds from a new iterator to its first batch after loading each state (mean)."""
    total = 0.0
    for i, state in enumerate(states):
        start = time.perf_counter()
        with iter(build(len(states), i)) as it:
            it.load_state_dict(state)
            next(it)
        total += time.perf_counter() - start
    return total / len(states)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=80_000)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--buffer", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        files = write_records(folder, args.records, args.files)

        def build(n: int, i: int) -> fl.Dataset:
            return replica(files, args.buffer, n, i)

        states = _checkpoint(build, by_value=False)
        print(f"chess pipeline, {args.records} records in {args.files} files, shuffle buffer "
              f"{args.buffer}, {REPLICAS} replicas after {BATCHES_BEFORE_CHECKPOINT} batches "
              f"of {BATCH}")
        groups = [(f"{REPLICAS} replicas (saved)", states, 0.0),
                  (f"{REPLICAS} (buffer by value)", _checkpoint(build, by_value=True), 0.0)]
        for m in (2, 8):
            start = time.perf_counter()
            merged = fl.merge_states(states, m, build)
            groups.append((f"re-dealt to {m}", merged, time.perf_counter() - start))
        for label, group, seconds in groups:
            sizes = [_size(s) for s in group]
            buffers = [_buffer_size(s) for s in group]
            saved = [fl.save_state(io.BytesIO(), s) for s in group]
            print(f"  {label:22} JSON bytes per replica: mean {sum(sizes) / len(sizes):>11,.0f}"
                  f" (shuffle stage {sum(buffers) / sum(sizes):.1%}, the rest "
                  f"{(sum(sizes) - sum(buffers)) / len(sizes):,.0f}); save_state bytes: mean "
                  f"{sum(saved) / len(saved):>11,.0f}"
                  + (f"; merge {seconds:.2f} s" if seconds else "")
                  + f"; restore {_restore_seconds(build, group):.2f} s")


if __name__ == "__main__":
    main()
