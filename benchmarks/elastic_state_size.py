"""Checkpoint size per replica of the chess pipeline, and of its re-deal to other counts.

``python -m benchmarks.elastic_state_size [--records 80000] [--files 16] [--buffer 10000]``

Four replicas each run ``files.shard(4, i) -> interleave(TFRecordDataset) -> shuffle(buffer)
-> batch(512) -> map(transform) -> prefetch`` (the chess workload, :mod:`feedline.demo.chess`)
for 20 batches, save their states, and the states are re-dealt to 2 and 8 replicas
(:func:`feedline.merge_states`). Printed: bytes of each state as JSON (what ``save_state``
writes before compression), the shuffle buffer's share of them, and the bytes a record of the
file takes. The buffer is stored by value (base64 of each serialized record); every other
stage stores positions.
"""

from __future__ import annotations

import argparse
import json
import tempfile

import feedline as fl
from feedline.demo.chess import transform, write_records

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
    return _size(node["buffer"])


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

        states = []
        for i in range(REPLICAS):
            with iter(build(REPLICAS, i)) as it:
                for _ in range(BATCHES_BEFORE_CHECKPOINT):
                    next(it)
                states.append(it.state_dict())
        print(f"chess pipeline, {args.records} records in {args.files} files, shuffle buffer "
              f"{args.buffer}, {REPLICAS} replicas after {BATCHES_BEFORE_CHECKPOINT} batches "
              f"of {BATCH}")
        for label, group in [(f"{REPLICAS} replicas (saved)", states),
                             *[(f"re-dealt to {m}", fl.merge_states(states, m, build))
                               for m in (2, 8)]]:
            sizes = [_size(s) for s in group]
            buffers = [_buffer_size(s) for s in group]
            print(f"  {label:22} bytes per replica: mean {sum(sizes) / len(sizes):>11,.0f}, "
                  f"max {max(sizes):>11,}; shuffle buffer {sum(buffers) / sum(sizes):.1%} "
                  f"of it; the rest {(sum(sizes) - sum(buffers)) / len(sizes):,.0f} bytes")


if __name__ == "__main__":
    main()
