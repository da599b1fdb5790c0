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
        "cache-files",
        "A cache file is read only by the pipeline that wrote it",
        (
            ("cache(filename) written by one pipeline and read by another (TF's test replays "
             "a file cache under an empty upstream, repeat(0)): TF reads the file by its name "
             "and replays 20 elements; feedline keys the cache by the pipeline's fingerprint, "
             "warns that the file was written by a different pipeline and reads the (empty) "
             "upstream. Kept on purpose: replaying a file under a pipeline that would compute "
             "other elements silently gives stale data (a changed map function, other "
             "files); the warning says which stage differs.",
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
