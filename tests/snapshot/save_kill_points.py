"""Saves that SIGKILL themselves at a chosen point (test_save_atomic.py runs them in a child).

Run as ``python save_kill_points.py FOLDER WHICH POINT``: saves pipeline ``WHICH`` (``old`` or
``new``) to ``FOLDER`` and kills its own process with SIGKILL at ``POINT``:

``rounds:N``        once N rounds of the new save are committed
``before_switch``   when the new save is whole, before ``dataset.json`` names it
``in_switch``       while the new ``dataset.json`` is written aside, before its rename
``after_switch``    right after ``dataset.json`` names the new save
``removing``        while the replaced save is being removed: half its files gone
``none``            never (a save that completes)

The points are reached by wrapping the functions that do each step, so a kill lands exactly
there on every run (no timing involved).
"""

import os
import signal
import sys

import numpy as np

import feedline as fl

CALLS: list[int] = []
ROUND_BYTES = 400  # a few elements per committed round: many rounds


def old_element(x):
    CALLS.append(int(x))
    return {"x": np.full(8, x, dtype=np.int64), "tag": b"old%d" % x}


def new_element(x):
    CALLS.append(int(x))
    return {"x": np.full(8, x * 10, dtype=np.int64), "tag": b"new%d" % x}


def pipeline(which):
    if which == "old":
        return fl.Dataset.range(40).map(old_element)
    return fl.Dataset.range(60).map(new_element)


def save(folder, which):
    pipeline(which).save(folder, compression="AUTO",
                         checkpoint_args={"checkpoint_interval": ROUND_BYTES})


def _die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def arm(point):
    """Wrap the step ``point`` names so that the process dies there."""
    from feedline.snapshot import save_load, store

    if point.startswith("rounds:"):
        limit = int(point.split(":")[1])
        record = store.StoreWriter._record_oldest

        def record_then_die(self):
            record(self)
            if self.progress["rounds"] >= limit:
                _die()

        store.StoreWriter._record_oldest = record_then_die
    elif point in ("before_switch", "in_switch", "after_switch"):
        switch = save_load.switch_to

        def switch_and_die(*args, **kwargs):
            if point == "before_switch":
                _die()
            if point == "in_switch":  # the manifest's temporary file is whole, not renamed
                os.replace = lambda *args, **kwargs: _die()
            switch(*args, **kwargs)
            _die()

        save_load.switch_to = switch_and_die
    elif point == "removing":
        def remove_half_then_die(path):
            # What a recursive removal killed half-way leaves: some files gone, the rest
            # (the manifest among them, wherever the walk had not reached) still there.
            files = sorted(os.path.join(root, name) for root, _, names in os.walk(path)
                           for name in names)
            for name in files[::2]:
                if os.path.basename(name) != "dataset.json":
                    os.unlink(name)
            _die()

        save_load.remove = remove_half_then_die
    elif point != "none":
        raise ValueError(f"unknown kill point {point!r}")


if __name__ == "__main__":
    folder, which, point = sys.argv[1:4]
    arm(point)
    save(folder, which)
