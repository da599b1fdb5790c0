"""Pipelines that test_snapshot.py builds in the test process and in subprocesses alike
(so their fingerprints are the same code)."""

import time

import numpy as np

import feedline as fl
from feedline.transforms.snapshot import SnapshotDataset

CALLS: list[int] = []


def expensive(x):
    CALLS.append(int(x))
    return {"x": np.full(16, x, dtype=np.int64), "name": b"e%d" % x}


def slow(x):
    time.sleep(0.0005)
    return expensive(x)


def upstream(function=expensive, count=300):
    return fl.Dataset.range(count).map(function)


def pipeline(folder, function=expensive, count=300, round_bytes=2_000):
    """``upstream().snapshot(folder)`` with small committed rounds (many chunks)."""
    return SnapshotDataset(upstream(function, count), str(folder), round_bytes=round_bytes)


def write(folder):
    for _ in pipeline(folder, slow, count=2000):
        pass
