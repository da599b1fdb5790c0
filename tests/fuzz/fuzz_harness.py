"""Seeded, bounded fuzzing of readers and decoders, each run in a child process.

A target is a corpus of valid inputs and a function that reads one (possibly damaged) input
the way a user would. The child mutates the corpus with a seeded generator, reads every
mutant, and reports, per input: success, an error of an allowed type that names where it
happened, or a failure (a raw exception, an error that does not say where, a hang). A crash
(segfault, abort) kills the child, which is why it is one: the parent sees the signal and the
input that caused it (written to the work folder before each read). Peak memory is the
child's own maximum RSS, and ``RLIMIT_DATA`` caps its anonymous memory so that a
decompression bomb fails as a ``MemoryError`` (a failure here) instead of taking the machine.

The number of inputs per target is small by default (a quick, deterministic run in the
suite); ``FEEDLINE_FUZZ_COUNT=10000`` runs the extended campaign::

    FEEDLINE_FUZZ_COUNT=10000 .venv/bin/python -m pytest tests/fuzz -q

Targets live in ``targets_*.py`` beside this file, each a module-level ``TARGETS`` dict of
name to :class:`FuzzTarget`.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import random
import resource
import signal
import subprocess
import sys
import sysconfig
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

DEFAULT_COUNT = 150
"""Inputs per target in the default (suite) run."""


def fuzz_count(default: int = DEFAULT_COUNT) -> int:
    """The number of inputs per target: ``FEEDLINE_FUZZ_COUNT`` if set, else ``default``."""
    value = os.environ.get("FEEDLINE_FUZZ_COUNT")
    return int(value) if value else default


@dataclasses.dataclass(frozen=True)
class FuzzTarget:
    """One reader or decoder under fuzzing.

    Attributes:
        corpus: Builds the valid inputs to mutate (called once in the child, given a scratch
            folder it may write into).
        read: Reads one input, given its bytes and a scratch folder; returns anything (its
            result is dropped) or raises.
        allowed: Exception types a damaged input may raise (feedline's own error types,
            usually ``FeedlineError``).
        where: Given an allowed error and the input's path (or ``None``), returns ``None``
            when the error says where the damage is, else what it lacks. Default: accept.
        memory_cap_mib: The documented peak memory for one input of this target; the child's
            anonymous memory is capped a little above it.
        seconds_per_input: A read that takes longer is a hang.
    """

    corpus: Callable[[Path], Sequence[bytes]]
    read: Callable[[bytes, Path], Any]
    allowed: tuple[type[BaseException], ...]
    where: Callable[[BaseException, Path | None], str | None] | None = None
    memory_cap_mib: int = 1024
    seconds_per_input: float = 10.0


FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

MIMALLOC_OPTIONS = {"MIMALLOC_ARENA_RESERVE": "65536", "MIMALLOC_PURGE_DELAY": "0"}
"""The child's mimalloc settings on a free-threaded build, so that ``RLIMIT_DATA`` bounds what
a read allocates about as it does on a GIL build. By default mimalloc reserves a GiB of
private writable address space at start-up (counted against the cap: every child failed
before its first input under any cap below 1.1 GiB) and keeps freed memory a while (a read of
damaged TFRecords peaked at 305 MiB RSS instead of 89 MiB, and reached the cap). Here it
reserves 64 MiB (in KiB) at a time and returns freed memory at once."""


# --------------------------------------------------------------------------- mutation
_INTERESTING = (b"\x00", b"\xff", b"\x7f", b"\x80", b"\x00\x00\x00\x00", b"\xff\xff\xff\xff",
                b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80", b"\xff" * 8, b"\x00" * 8,
                b"\x7f\xff\xff\xff\xff\xff\xff\xff", b"\x01\x00\x00\x00")


def mutate(data: bytes, rng: random.Random, corpus: Sequence[bytes]) -> bytes:
    """One to four seeded mutations of ``data``: bit flips, interesting values over integers,
    truncation, a chunk duplicated, removed or spliced from another corpus input."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(8)
        if not out:
            out += bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
            continue
        at = rng.randrange(len(out))
        if kind == 0:  # a bit flip
            out[at] ^= 1 << rng.randrange(8)
        elif kind == 1:  # a random byte
            out[at] = rng.randrange(256)
        elif kind == 2:  # an interesting integer over whatever is there
            value = rng.choice(_INTERESTING)
            out[at:at + len(value)] = value
        elif kind == 3:  # truncation
            del out[rng.randrange(len(out)):]
        elif kind == 4:  # a chunk removed
            del out[at:at + rng.randint(1, 64)]
        elif kind == 5:  # a chunk duplicated
            chunk = out[at:at + rng.randint(1, 64)]
            out[at:at] = chunk
        elif kind == 6:  # a chunk of another input spliced in
            other = rng.choice(corpus)
            if other:
                start = rng.randrange(len(other))
                out[at:at + rng.randint(1, 64)] = other[start:start + rng.randint(1, 64)]
        else:  # random bytes inserted
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return bytes(out)


# --------------------------------------------------------------------------- child
def _child(module: str, name: str, seed: int, count: int, work: Path) -> None:
    sys.path.insert(0, str(HERE))
    target: FuzzTarget = importlib.import_module(module).TARGETS[name]
    cap = (target.memory_cap_mib + 256) << 20  # the interpreter and its libraries
    resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
    corpus_dir = work / "corpus"
    corpus_dir.mkdir(parents=True, exist_ok=True)
    corpus = list(target.corpus(corpus_dir))
    rng = random.Random(seed)
    results: dict[str, Any] = {"ok": 0, "errors": 0, "failures": [], "error_types": {}}
    current = work / "current.bin"
    scratch = work / "scratch"
    for index in range(count):
        data = corpus[index % len(corpus)] if index < len(corpus) \
            else mutate(rng.choice(corpus), rng, corpus)
        current.write_bytes(data)  # what crashed the child, if it does
        (work / "index").write_text(str(index))
        scratch.mkdir(exist_ok=True)
        signal.alarm(int(target.seconds_per_input) + 1)  # a hang: SIGALRM ends the child
        try:
            target.read(data, scratch)
            results["ok"] += 1
        except target.allowed as error:
            results["errors"] += 1
            kind = type(error).__name__
            results["error_types"][kind] = results["error_types"].get(kind, 0) + 1
            lacking = target.where(error, scratch) if target.where else None
            if lacking is not None:
                results["failures"].append({"index": index, "kind": kind, "message":
                                            str(error)[:400], "why": lacking})
        except BaseException as error:  # noqa: BLE001 - what the harness is looking for
            if index < len(corpus):
                raise  # the valid corpus must read: a broken target, not a finding
            results["failures"].append({
                "index": index, "kind": type(error).__name__, "message": str(error)[:400],
                "why": "not an allowed error type",
                "traceback": traceback.format_exc()[-1500:]})
        finally:
            signal.alarm(0)
            for path in sorted(scratch.rglob("*"), reverse=True):
                path.unlink() if not path.is_dir() or path.is_symlink() else path.rmdir()
    results["peak_rss_mib"] = _own_peak_rss_mib()
    (work / "results.json").write_text(json.dumps(results))


def _own_peak_rss_mib() -> float:
    """This process's peak resident memory. Not ``ru_maxrss``: on Linux a child's starts at its
    parent's peak at the fork (a test runner of 1.4 GiB made every child read 1.4 GiB)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --------------------------------------------------------------------------- parent
@dataclasses.dataclass
class FuzzReport:
    """What one child run found."""

    inputs: int
    ok: int
    errors: int
    failures: list[dict[str, Any]]
    error_types: dict[str, int]
    peak_rss_mib: float
    crash: str | None
    seconds: float

    def problems(self, memory_cap_mib: int | None = None) -> list[str]:
        """Everything that makes this run a failure, as sentences (empty: a clean run)."""
        found = []
        if self.crash:
            found.append(self.crash)
        for failure in self.failures[:10]:
            found.append(f"input {failure['index']}: {failure['kind']}: {failure['message']} "
                         f"({failure['why']})\n{failure.get('traceback', '')}")
        if len(self.failures) > 10:
            found.append(f"... and {len(self.failures) - 10} more failures")
        if memory_cap_mib is not None and self.peak_rss_mib > memory_cap_mib:
            found.append(f"peak RSS {self.peak_rss_mib:.0f} MiB over the cap of "
                         f"{memory_cap_mib} MiB")
        return found


def run_fuzz(module: str, name: str, *, seed: int, count: int, work: Path,
             timeout: float | None = None) -> FuzzReport:
    """Fuzz target ``name`` of ``targets`` module ``module`` with ``count`` inputs in a child
    process; ``timeout`` (default: 60 s + 1 s per input) bounds the whole run."""
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), str(HERE), os.environ.get("PYTHONPATH", "")]))
    if FREE_THREADED:
        for option, value in MIMALLOC_OPTIONS.items():
            env.setdefault(option, value)
    process = subprocess.run(
        [sys.executable, str(Path(__file__)), module, name, str(seed), str(count), str(work)],
        env=env, capture_output=True, text=True,
        timeout=timeout if timeout is not None else 60 + count)
    seconds = time.monotonic() - started
    results_file = work / "results.json"
    if process.returncode != 0 or not results_file.exists():
        index = (work / "index").read_text() if (work / "index").exists() else "?"
        how = (f"killed by signal {signal.Signals(-process.returncode).name}"
               if process.returncode < 0 else f"exit {process.returncode}")
        crash = (f"the child {how} at input {index} (saved as {work / 'current.bin'});"
                 f" stderr:\n{process.stderr[-3000:]}")
        return FuzzReport(int(index) if index.isdigit() else 0, 0, 0, [], {}, 0.0, crash,
                          seconds)
    results = json.loads(results_file.read_text())
    return FuzzReport(count, results["ok"], results["errors"], results["failures"],
                      results["error_types"], results["peak_rss_mib"], None, seconds)


def assert_clean(module: str, name: str, tmp_path: Path, *, seed: int = 0,
                 count: int | None = None) -> FuzzReport:
    """Run :func:`run_fuzz` and fail with every problem found; returns the report."""
    sys.path.insert(0, str(HERE))
    target: FuzzTarget = importlib.import_module(module).TARGETS[name]
    report = run_fuzz(module, name, seed=seed, count=count or fuzz_count(), work=tmp_path)
    problems = report.problems(target.memory_cap_mib)
    assert not problems, f"fuzzing {name} ({report.inputs} inputs):\n" + "\n".join(problems)
    return report


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]))
