"""Where feedline differs from TensorFlow: each row a cause, the cases it makes fail.

Every case listed here is ``xfail(strict=True)`` in test_tf_conformance.py, so the suite
passes while the difference stands and fails (XPASS) as soon as feedline matches
TensorFlow -- then the pattern goes. ``write_deviations.py`` checks that these patterns
cover exactly the cases that differ and writes DEVIATIONS.md (TF's result beside
feedline's for every case).

Patterns are ``fnmatch`` patterns over ``"<module>::<case name>"``; ``[`` is written ``[[]``.

Example:
    >>> expand(["range::testName"], ["range::testName", "range::testStop[output_type=int32]"])
    ['range::testName']
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass


@dataclass(frozen=True)
class Deviation:
    """One row of DEVIATIONS.md.

    Attributes:
        key: Short name of the cause.
        title: What differs, in one line.
        details: TF's behaviour and feedline's, one item per distinct behaviour, with the
            patterns of the cases each explains.
    """

    key: str
    title: str
    details: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def patterns(self) -> tuple[str, ...]:
        return tuple(p for _, patterns in self.details for p in patterns)


ROWS: tuple[Deviation, ...] = (
    Deviation(
        "random-access",
        "Random access (tf.data.experimental.at, global_shuffle) where TF has it and "
        "feedline does not, or answers otherwise",
        (
            ("repeat() offers no random access: TF's at(ds.repeat(n), i) is element i % len "
             "and global_shuffle works through a finite repeat; feedline raises TypeError "
             "('stage repeat does not offer random access'), so every index read and every "
             "global shuffle over repeat(n>1) fails.",
             ("repeat::RepeatRandomAccessTest.testInvalidIndex*",
              "repeat::RepeatRandomAccessTest.testEmptyDataset*",
              "repeat::RepeatRandomAccessTest.testFiniteRepeat*",
              "repeat::RepeatRandomAccessTest.testRepeatRepeat*",
              "repeat::RepeatGlobalShuffleTest.testRepeat*",
              "repeat::RepeatGlobalShuffleCheckpointTest.*",
              "take::TakeGlobalShuffle*repetitions=2*", "skip::SkipGlobalShuffle*repetitions=2*",
              "from_tensor_slices::FromTensorSlicesGlobalShuffle*repetitions=3*",
              "list_files::ListFilesGlobalShuffle*repetitions=2*")),
            ("unbatch() offers no random access: TF reads element i of "
             "range(10).batch(4, drop_remainder=True).unbatch() (and OutOfRange past the "
             "end); feedline raises TypeError.",
             ("unbatch::UnbatchRandomAccessTest.test",
              "unbatch::UnbatchRandomAccessTest.testInvalidIndex*")),
            ("A negative index: TF's at(ds, -1) raises OutOfRangeError; feedline's ds[-1] is "
             "the last element (Python sequence indexing, documented in Dataset.__getitem__).",
             ("*RandomAccessTest.testInvalidIndex[[]index=-1]",)),
            ("global_shuffle over skip(-1): TF refuses (FailedPrecondition: skip(-1) has no "
             "random access); feedline skips everything and shuffles the empty result.",
             ("skip::SkipGlobalShuffleTest.testNegativeSkip*",)),
        )),
    Deviation(
        "seeds-across-iterators",
        "A seeded random stage that reshuffles each iteration repeats its first order for "
        "every new iterator of the same dataset object",
        (
            ("shuffle(10, seed=42, reshuffle_each_iteration=True) and "
             "sample_from_datasets(seed=42, rerandomize_each_iteration=True): TF gives a new "
             "order to each iter(ds) of the same dataset object (its seed generator advances); "
             "feedline restarts the epoch count for each new iterator, so two iterations are "
             "equal. Epochs inside one iterator (repeat) do differ in both.",
             ("shuffle::testReshuffleIterationEpochs[[]reshuffle=True,seed=42]",
              "sample_from_datasets::testSampleFromDatasetsRerandomizeEachIterationEpochs"
              "[[]rerandomize=True]")),
        )),
    Deviation(
        "arguments",
        "Arguments TF accepts that feedline lacks, or validates differently",
        (
            ("name= on sources: TF's range(5, name=...), from_tensor_slices(x, name=...) and "
             "random(seed, name=...) accept it; feedline's raise TypeError (unexpected "
             "keyword).",
             ("range::testName", "from_tensor_slices::FromTensorSlicesRandomAccessTest.testName",
              "random::testName")),
            ("random(rerandomize_each_iteration=...): TF accepts None/True/False; feedline's "
             "random(seed) has no such argument (TypeError).",
             ("random::testRerandomize*", "random::RandomCheckpointTest.*")),
            ("prefetch(buffer_size=None): TF accepts it (as AUTOTUNE); feedline raises "
             "TypeError.",
             ("prefetch::testBufferSize[[]buffer_size=None]",)),
            ("sample_from_datasets weights: TF raises TypeError for integer weights [1, 1] "
             "(floats required), feedline accepts them; TF produces nothing when every weight "
             "is 0 (stop_on_empty_dataset=False), feedline raises ValueError.",
             ("sample_from_datasets::testErrors[[]integer_weights]",
              "sample_from_datasets::testSampleFromDatasetsAllWeightsAreZero")),
            ("padded_batch(padding_values=(-1, '<end>', None)): TF reads None as 'default "
             "padding for that component'; feedline raises ValueError (structure mismatch).",
             ("padded_batch::testPaddedBatchDatasetNonDefaultPadding[[]dict_padding_None]",)),
        )),
    Deviation(
        "cardinality-and-cache",
        "Cardinality of ignore_errors and of repeat() over an input of unknown size, and "
        "cache files shared between pipelines",
        (
            ("range(10).ignore_errors().cardinality(): TF says UNKNOWN (-2), errors may drop "
             "elements; feedline passes the input's 10 through.",
             ("ignore_errors::testCardinality",)),
            ("repeat() over an input of unknown size (from_generator), here under "
             "bucket_by_sequence_length: TF says INFINITE (-1), feedline's repeat says UNKNOWN "
             "(-2) (the input might be empty).",
             ("bucket_by_sequence_length::testCardinality",)),
            ("cache(filename) written by one pipeline and read by another (TF's test replays "
             "a file cache under an empty upstream, repeat(0)): TF reads the file by its name "
             "and replays 20 elements; feedline keys the cache by the pipeline's fingerprint, "
             "warns that the file was written by a different pipeline and reads the (empty) "
             "upstream.",
             ("cache::FileCacheTest.testCacheDatasetPassthrough",)),
        )),
)


def expand(patterns: list[str] | tuple[str, ...], case_ids: list[str]) -> list[str]:
    """The case ids matching any of ``patterns``, in ``case_ids`` order."""
    return [c for c in case_ids if any(fnmatch.fnmatchcase(c, p) for p in patterns)]


def deviations(case_ids: list[str]) -> dict[str, str]:
    """``case id -> reason`` for every case a row's patterns match."""
    out: dict[str, str] = {}
    for row in ROWS:
        for text, patterns in row.details:
            for case_id in expand(patterns, case_ids):
                out.setdefault(case_id, f"{row.key}: {text}")  # the first cause listed wins
    return out
