"""Port of tensorflow/python/data/kernel_tests/list_files_test.py.

The files live in a scratch folder whose path differs between the TF recording and the
test run, so results are recorded as names relative to that folder.
"""

from __future__ import annotations

import os

from tfcases.harness import Suite, label, params, plain, scratch_dir

SUITE = Suite("list_files_test.py")
add = SUITE.add


def _folder(names):
    folder = scratch_dir()
    for name in names:
        open(os.path.join(folder, name), "a").close()
    return folder


def relative_names(elements):
    """Each file name relative to its folder."""
    return [os.path.basename(plain(e)) for e in elements]


def sorted_names(elements):
    return sorted(relative_names(elements))


ABC = ["a", "b", "c"]
SUFFIXES = ["a.txt", "b.py", "c.py", "d.pyc"]

add("testEmptyDirectory", lambda ns: ns.Dataset.list_files(os.path.join(_folder([]), "*")),
    derive=sorted_names)
add("testSimpleDirectory", lambda ns: ns.Dataset.list_files(os.path.join(_folder(ABC), "*")),
    derive=sorted_names)
add("testSimpleDirectoryNotShuffled", lambda ns: ns.Dataset.list_files(
    os.path.join(_folder(["b", "c", "a"]), "*"), shuffle=False), derive=relative_names)


def _fixed_seed(ns):
    pattern = os.path.join(_folder(ABC), "*")
    runs = [[os.path.basename(plain(e)) for e in ns.read_all(
        ns.Dataset.list_files(pattern, shuffle=True, seed=37))] for _ in range(3)]
    return sorted(runs[0]), runs[0] == runs[1] == runs[2]


add("testFixedSeedResultsInRepeatableOrder", _fixed_seed, mode="value")
add("testSimpleDirectoryInitializer", lambda ns: ns.Dataset.list_files(
    os.path.join(_folder(ABC), "*")), derive=sorted_names)
add("testFileSuffixes", lambda ns: ns.Dataset.list_files(
    os.path.join(_folder(SUFFIXES), "*.py")), derive=sorted_names)
add("testFileMiddles", lambda ns: ns.Dataset.list_files(
    os.path.join(_folder(["a.txt", "b.py", "c.pyc"]), "*.py*")), derive=sorted_names)
add("testNoShuffle", lambda ns: ns.Dataset.list_files(
    os.path.join(_folder(ABC), "*"), shuffle=False).repeat(2),
    derive=lambda es: (sorted_names(es), relative_names(es)[:3] == relative_names(es)[3:]))
for name in ("testMultiplePatternsAsList", "testMultiplePatternsAsTensor"):
    add(name, lambda ns: (lambda folder: ns.Dataset.list_files(
        [os.path.join(folder, pat) for pat in ["*.py", "*.txt"]]))(_folder(SUFFIXES)),
        derive=sorted_names)

ELEVEN = list("abcdefghijk")


def _global(ns, repetitions, seed, reshuffle_each_iteration):
    ds = ns.Dataset.list_files(os.path.join(_folder(ELEVEN), "*"), shuffle=False)
    ds = ds.prefetch(buffer_size=ns.AUTOTUNE)
    if repetitions > 1:
        ds = ds.repeat(repetitions)
    return ns.global_shuffle(ds, seed, reshuffle_each_iteration)


def _global_summary(ns, p):
    ds = _global(ns, **p)
    out = [os.path.basename(plain(e)) for e in ns.read_all(ds)]
    expected = ELEVEN * p["repetitions"]
    return {"sorted": sorted(out), "shuffled": out != expected,
            "len_is_cardinality": len(out) == ns.cardinality(ds)}


for p in params(repetitions=[1, 2], seed=[None, 42], reshuffle_each_iteration=[True, False]):
    add("ListFilesGlobalShuffleTest.test" + label(p), lambda ns, p=p: _global_summary(ns, p),
        mode="value")
add("ListFilesGlobalShuffleTest.testShuffleNotSupported", lambda ns: ns.global_shuffle(
    ns.Dataset.list_files(os.path.join(_folder(ELEVEN), "*"), shuffle=True)),
    derive=sorted_names)


def _restored_names(elements, uninterrupted):
    return {"restored_equals_uninterrupted": relative_names(elements) == relative_names(
        uninterrupted), "sorted": sorted_names(elements)}


_restored_names.needs_uninterrupted = True

for p in params(repetitions=[1, 2], reshuffle_each_iteration=[True, False]):
    SUITE.checkpoint("ListFilesGlobalShuffleCheckpointTest.test" + label(p),
                     lambda ns, p=p: _global(ns, p["repetitions"], 42,
                                             p["reshuffle_each_iteration"]),
                     derive=sorted_names if p["reshuffle_each_iteration"] else _restored_names)

SUITE.skip("tesEmptyDirectoryInitializer", "misspelt in TF: never runs as a test")
SUITE.skip("ListFilesGlobalShuffleTest (inherited ListFilesTest methods)", "the same cases "
           "again in TF's subclass; ported once")
