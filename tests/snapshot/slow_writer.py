"""The pipeline test_save_load.py kills with SIGKILL while it is being saved, then resumes.

Run as ``python -c "import slow_writer; slow_writer.main(folder)"`` (this folder on the path).
"""

import time

import numpy as np

import feedline as fl

ELEMENTS = 2000
ROUND_BYTES = 10_000  # about 110 committed rounds


def slow(x):
    time.sleep(0.0005)
    return {"x": np.full(64, x, dtype=np.int64), "tag": b"%d" % x}


def pipeline():
    return fl.Dataset.range(ELEMENTS).map(slow)


def main(folder):
    pipeline().save(folder, compression="AUTO",
                    checkpoint_args={"checkpoint_interval": ROUND_BYTES})
