"""The service (``fl.service.distribute`` on Ray): GIL-bound scaling and per-batch overhead.

``python -m benchmarks.service [--lines 40000] [--rounds 5] [--small] [--write]``

1. **A GIL-bound map** (the ``python_heavy`` workload: ``common.tokenize``, pure Python, on
   the generated text lines, batch 128) read as one pass from building the pipeline to the
   last batch:

   - locally, in this one process: ``from_tensor_slices(lines).map(tokenize).batch(128)``
     (the baseline of the ratios: one core, the GIL);
   - locally as ``./dev bench`` runs it for feedline (``systems/feedline_sys.py``:
     ``map(tokenize, AUTOTUNE, executor="process")``, prefetch): what one machine does
     without a service, for reference;
   - the baseline pipeline followed by ``distribute("distributed_epoch", cluster)`` on a
     ``LocalCluster`` of 1 worker, and of 2 workers.

2. **Per-batch overhead of the service path**: pipelines that do next to nothing, locally
   and through each cluster: ``range(n).map(i -> np.full(256, i, int64))`` (batches of
   2 KiB) and ``range(n).map(i -> np.full((256, 1024), i, float32))`` (1 MiB): one
   ``map`` call per batch, so that the local pass costs a few microseconds a batch.
   Reported: microseconds per batch over the whole pass (job start included), the
   service's minus the local, the first batch, and the consumer process's CPU per batch
   (its threads, Ray's included; the workers' CPU is not in it).

Both clusters are started once, before anything is timed (about 5 s each), and live side
by side (Ray is offered at least 3 logical CPUs so that both fit: workers reserve one each;
an idle worker uses no CPU). One warm-up pass of every variant comes first (workers import
and unpickle; the page cache), then ``--rounds`` rounds, each running every variant once in
the same order, so that load from others on a shared machine hits all of them alike. The
tables give medians and min–max. Every timed pass is checked: its element count and the
order-free digest of its batches (``common.batch_digest``) must equal the local pass's (and
the local pass's must equal what is computed without feedline: ``reference.py`` for the
text, a closed form for the overhead pipelines); a mismatch prints
``!!! WRONG OUTPUT``, marks the row and makes the command exit with status 1. A pass that
takes longer than ``--run-timeout`` is reported as a hang (threads' stacks on stderr), and
the command exits with status 1.

``--write`` puts the tables in ``benchmarks/RESULTS-service.md``.
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import dataclasses
import faulthandler
import os
import platform
import resource
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common, data, reference
from benchmarks.common import RunSpec

RESULTS = Path(__file__).resolve().parent / "RESULTS-service.md"
SEED = 1234
MODE = "distributed_epoch"
SMALL_ROWS = 256
LARGE_SHAPE = (256, 1024)  # float32: 1 MiB


# ------------------------------------------------------------------------------ pipelines
def heavy_local(lines: np.ndarray) -> Any:
    """The GIL-bound pipeline, inline: one process, one core."""
    import feedline as fl

    return fl.Dataset.from_tensor_slices(lines).map(common.tokenize).batch(common.TEXT_BATCH)


def heavy_processes(meta: dict[str, Any]) -> Any:
    """feedline's python_heavy pipeline of ``./dev bench`` (``executor="process"``)."""
    from benchmarks.systems import feedline_sys

    spec = RunSpec("feedline", "recommended", "python_heavy", "measure", meta, seed=SEED)
    feedline_sys.prepare(spec)
    return feedline_sys.build(spec)


def small_batch(i: Any) -> np.ndarray:
    return np.full(SMALL_ROWS, i, dtype=np.int64)


def small_batches(count: int) -> Any:
    import feedline as fl

    return fl.Dataset.range(count).map(small_batch)


def large_batch(i: Any) -> np.ndarray:
    return np.full(LARGE_SHAPE, i, dtype=np.float32)


def large_batches(count: int) -> Any:
    import feedline as fl

    return fl.Dataset.range(count).map(large_batch)


def through(dataset: Any, cluster: Any) -> Any:
    import feedline as fl

    return dataset.apply(fl.service.distribute(MODE, cluster))


# ------------------------------------------------------------------------------ one pass
@dataclasses.dataclass
class Pass:
    """One timed pass: wall seconds, CPU seconds of this process and of its whole process
    tree, first batch, what it produced."""

    seconds: float
    first_s: float
    cpu_s: float
    tree_cpu_s: float
    batches: int
    rows: int
    digest: float
    check_s: float
    error: str = ""


class Watchdog:
    """After ``seconds``, print every thread's stack and interrupt the main thread (a hung
    pass becomes a ``KeyboardInterrupt`` there); 30 s later, end the process."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.fired = False
        self._timers: list[threading.Timer] = []

    def _fire(self) -> None:
        self.fired = True
        print(f"!!! HANG: a pass took more than {self.seconds:.0f} s; threads:",
              file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        _thread.interrupt_main()

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        self.fired = False
        timers = [threading.Timer(self.seconds, self._fire),
                  threading.Timer(self.seconds + 30, lambda: os._exit(3))]
        for timer in timers:
            timer.daemon = True
            timer.start()
        try:
            yield
        finally:
            for timer in timers:
                timer.cancel()


def tree_cpu() -> float:
    """CPU seconds of this process and every process under it (Ray's: its raylet, object
    store, dispatchers and workers are started by ``LocalCluster`` here; worker processes
    of ``executor="process"``), those already ended included."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for process in [me, *me.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue  # ended meanwhile: counted below once reaped
        total += times.user + times.system
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    return total + ended.ru_utime + ended.ru_stime


def machine_busy() -> float:
    """CPU seconds every process of the machine has used (all cores, not idle)."""
    import psutil

    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0) \
        - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


def timed_pass(make: Callable[[], Any], watchdog: Watchdog) -> Pass:
    """Build the pipeline and read one whole pass; errors (and hangs) are recorded."""
    batches = rows = 0
    digest = check = 0.0
    first: float | None = None
    tree = tree_cpu()
    cpu = time.process_time()
    started = time.perf_counter()
    try:
        with watchdog.guard(), iter(make()) as iterator:
            for batch in iterator:
                now = time.perf_counter()
                if first is None:
                    first = now - started
                batches += 1
                rows += common.batch_size_of(batch)
                digest += common.batch_digest(batch)
                check += time.perf_counter() - now
    except KeyboardInterrupt:
        if not watchdog.fired:
            raise
        error = f"hang: no end after {watchdog.seconds:.0f} s ({batches} batches read)"
    except Exception as exc:  # noqa: BLE001 - reported in the table, exit status 1
        error = f"{type(exc).__name__}: {str(exc)[:300]}"
    else:
        error = ""
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu
    return Pass(seconds, first if first is not None else seconds, cpu, tree_cpu() - tree,
                batches, rows, digest, check, error)


# ------------------------------------------------------------------------------ the runs
@dataclasses.dataclass
class Variant:
    section: str  # "heavy", "small", "large"
    label: str
    make: Callable[[], Any]
    local: bool = False  # the reference of its section
    passes: list[Pass] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)


def check(variant: Variant, result: Pass, expected: dict[str, Any] | None) -> None:
    """Record what is wrong with ``result`` (an error, or other elements than
    ``expected``)."""
    problem = result.error
    if not problem and expected is not None:
        if result.rows != expected["count"] or result.batches != expected["batches"]:
            problem = (f"{result.rows} rows in {result.batches} batches, expected "
                       f"{expected['count']} in {expected['batches']}")
        elif abs(result.digest - expected["digest"]) > 1e-9 * abs(expected["digest"]):
            problem = f"digest {result.digest!r}, expected {expected['digest']!r}"
    if problem:
        variant.problems.append(problem)
        print(f"!!! WRONG OUTPUT: {variant.label}: {problem}", file=sys.stderr, flush=True)


def overhead_reference(count: int, shape: tuple[int, ...]) -> dict[str, Any]:
    """What ``count`` batches ``np.full(shape, i)``, ``i`` in ``range(count)``, add up to.

    Example:
        >>> overhead_reference(3, (4, 128))
        {'count': 12, 'batches': 3, 'digest': 768.0}
    """
    width = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    sampled = len(range(0, width, max(1, width // 64)))
    return {"count": count * shape[0], "batches": count,
            "digest": float(shape[0] * sampled * (count * (count - 1) // 2))}


def run_all(variants: list[Variant], rounds: int, watchdog: Watchdog,
            references: dict[str, dict[str, Any]], log: Callable[[str], None]) -> None:
    """Warm-up passes, then ``rounds`` rounds of every variant in order. Each section's
    local warm-up pass is checked against ``references`` (computed without feedline) and
    is then what every pass of that section must produce."""
    expected = dict(references)
    for variant in variants:
        log(f"warm-up: {variant.label}")
        result = timed_pass(variant.make, watchdog)
        check(variant, result, expected[variant.section])
        if variant.local and not variant.problems:
            expected[variant.section] = {"count": result.rows, "batches": result.batches,
                                         "digest": result.digest}
    for number in range(rounds):
        log(f"round {number + 1} of {rounds}")
        for variant in variants:
            result = timed_pass(variant.make, watchdog)
            check(variant, result, expected[variant.section])
            variant.passes.append(result)


# ------------------------------------------------------------------------------ report
def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _status(variant: Variant) -> str:
    if not variant.problems:
        return "ok"
    first = variant.problems[0]
    more = f" (and {len(variant.problems) - 1} more)" if len(variant.problems) > 1 else ""
    return f"**FAILED**: {first}{more}"


def markdown(result: dict[str, Any]) -> str:
    """The tables of ``result`` (what :func:`main` measured)."""
    lines = [f"`{result['command']}` on {result['machine']}, {result['date']}.", "",
             (f"feedline {result['revision']}; Ray {result['ray']}, Python {result['python']}, "
              f"`{result['mode']}`. Load average (1 min) {result['load'][0]:.2f} at the start, "
              f"{result['load'][1]:.2f} at the end; processes other than this benchmark's used "
              f"{result['others']:.2f} of the {result['cores']} cores on average during the "
              f"warm-up and timed passes. Clusters started before timing ({result['startup']}); "
              f"one warm-up pass of each variant; then {result['rounds']} rounds of all of "
              "them in the order of the tables. Medians of the rounds (min–max)."), ""]
    heavy = result["heavy"]
    lines += [(f"## GIL-bound map: python_heavy, {heavy['lines']:,} lines, pure-Python "
               f"`tokenize`, batch {common.TEXT_BATCH}"), "",
              ("| pipeline | lines/s | min–max | vs local | first batch (ms) | CPU s per pass, "
               "this process | CPU s per pass, process tree | check |"),
              "|---|---|---|---|---|---|---|---|"]
    base = None
    for row in heavy["rows"]:
        rates = [row["rows"] / s for s in row["seconds"]] if row["seconds"] else []
        rate = _median(rates)
        if row["local"]:
            base = rate
        ratio = f"**{rate / base:.2f}x**" if base and rates else "–"
        spread = f"{min(rates):,.0f}–{max(rates):,.0f}" if rates else "–"
        lines.append(f"| {row['label']} | {rate:,.0f} | {spread} | {ratio} | "
                     f"{_median(row['first_s']) * 1e3:,.0f} | {_median(row['cpu_s']):.2f} | "
                     f"{_median(row['tree_cpu_s']):.2f} | {row['status']} |")
    scaling = heavy.get("scaling")
    lines.append("")
    if scaling is not None:
        lines += [(f"Service, 2 workers / 1 worker: **{scaling:.2f}x** (ideal on "
                   f"{result['cores']} cores: {min(2, result['cores'])}x, less the consumer's "
                   "own share of a core)."), ""]
    rows = {row["label"]: row for row in heavy["rows"]}
    local = next((row for row in heavy["rows"] if row["local"]), None)
    two = rows.get("service, 2 workers")
    local_cpu = _median(local["tree_cpu_s"]) if local and local["tree_cpu_s"] else 0.0
    two_cpu = _median(two["tree_cpu_s"]) if two and two["tree_cpu_s"] else 0.0
    if local_cpu > 0 and two_cpu > 0:  # a tiny pass can measure 0 CPU s
        bound = min(2, result["cores"]) * local_cpu / two_cpu
        lines += [(f"From CPU alone (whatever else runs): a service pass with 2 workers costs "
                   f"{two_cpu:.2f} CPU s against {local_cpu:.2f} locally "
                   f"({two_cpu / local_cpu - 1:+.0%}), so with {min(2, result['cores'])} "
                   f"cores free it could reach at most **{bound:.2f}x** local."), ""]
    lines += ["## Per-batch overhead of the service path", "",
              ("| pipeline | where | µs per batch | min–max | service − local | first batch "
               "(ms) | CPU µs per batch, this process | CPU µs per batch, process tree | "
               "check |"),
              "|---|---|---|---|---|---|---|---|---|"]
    for section in result["overhead"]:
        local = None
        for row in section["rows"]:
            per = [s / row["batches"] * 1e6 for s in row["seconds"]] if row["batches"] else []
            value = _median(per)
            if row["local"]:
                local = value
                extra = "–"
            else:
                extra = f"**{value - local:+,.0f}**" if local is not None and per else "–"
            spread = f"{min(per):,.0f}–{max(per):,.0f}" if per else "–"
            cpu, tree = ((_median([c / row["batches"] * 1e6 for c in row[key]])
                          if row["batches"] else float("nan")) for key in ("cpu_s", "tree_cpu_s"))
            lines.append(f"| {section['name']} | {row['label']} | {value:,.1f} | {spread} | "
                         f"{extra} | {_median(row['first_s']) * 1e3:,.1f} | {cpu:,.0f} | "
                         f"{tree:,.0f} | {row['status']} |")
    lines += ["", ("Each figure includes the consumer loop's own check (count and digest of "
                   "every batch, median µs per batch: " + ", ".join(
                       f"{s['name']} {s['check_us']:.1f}" for s in result["overhead"])
                   + f"; python_heavy {heavy['check_us']:.1f}), the same for every variant. "
                   "CPU: this process (the consumer: its threads, Ray's client threads "
                   "included) and its whole process tree (Ray's raylet, object store, GCS, "
                   "dispatchers and the workers of both clusters, idle ones included; the "
                   "worker processes of `executor=\"process\"`). The tree's CPU of a pass "
                   "shows what a pass costs the machine whatever else runs on it; lines/s "
                   "depends on the cores others leave free.")]
    if result.get("notes"):
        lines += [""] + [f"- {note}" for note in result["notes"]]
    return "\n".join(lines)


def _rows_of(variants: list[Variant], section: str) -> list[dict[str, Any]]:
    return [{"label": v.label, "local": v.local,
             "rows": v.passes[0].rows if v.passes else 0,
             "batches": v.passes[0].batches if v.passes else 0,
             "seconds": [p.seconds for p in v.passes if not p.error],
             "first_s": [p.first_s for p in v.passes if not p.error],
             "cpu_s": [p.cpu_s for p in v.passes if not p.error],
             "tree_cpu_s": [p.tree_cpu_s for p in v.passes if not p.error],
             "status": _status(v)}
            for v in variants if v.section == section]


def _check_us(variants: list[Variant], section: str) -> float:
    return _median([p.check_s / p.batches * 1e6 for v in variants if v.section == section
                    for p in v.passes if p.batches])


def revision() -> str:
    """The repository's commit, and whether ``feedline/`` differed from it (the code that
    ran)."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "feedline"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "(revision unknown)"
    return f"at {commit}" + (" with uncommitted changes in feedline/" if dirty else "")


def payload_note(lines: np.ndarray) -> str:
    """What each pass of the GIL-bound pipeline sends to the service before the first
    batch: the pipeline, its lines included, pickled (``distribute`` does this once per
    pass, in the consumer)."""
    from feedline.service.worker import pickle_pipeline

    times = []
    for _ in range(3):
        started = time.perf_counter()
        payload = pickle_pipeline(heavy_local(lines), "benchmark")
        times.append(time.perf_counter() - started)
    return (f"The GIL-bound pipeline, with its {len(lines):,} lines, pickles to "
            f"{len(payload) / 2**20:,.1f} MiB in {statistics.median(times) * 1e3:,.0f} ms "
            "(median of 3); `distribute` does it, and its `ray.put`, once per pipeline and "
            "Ray session, not once per pass.")


# ------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=None,
                        help="text lines of the GIL-bound workload (default 40000; "
                             "--small 4000)")
    parser.add_argument("--small-batches", type=int, default=None,
                        help="batches of 2 KiB in the overhead pipeline (default 4000; "
                             "--small 1000)")
    parser.add_argument("--large-batches", type=int, default=None,
                        help="batches of 1 MiB in the overhead pipeline (default 1000; "
                             "--small 200)")
    parser.add_argument("--small", action="store_true", help="about a tenth of the data")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--run-timeout", type=float, default=300.0,
                        help="seconds a pass may take before it is reported as a hang")
    parser.add_argument("--cache", type=Path, default=data.CACHE,
                        help="where the generated text and its reference digest are kept")
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    args = parser.parse_args(argv)
    lines_count = args.lines or (4_000 if args.small else 40_000)
    small_count = args.small_batches or (1_000 if args.small else 4_000)
    large_count = args.large_batches or (200 if args.small else 1_000)

    def log(message: str) -> None:
        print(f"[service bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr,
              flush=True)

    import ray

    import feedline as fl

    cores = len(os.sched_getaffinity(0))
    code_revision = revision()  # before anything imports feedline's service on workers
    load_start = os.getloadavg()[0]
    meta = data.text(lines_count, SEED, args.cache)
    lines = np.array(data.read_lines(meta), dtype=object)
    expected = reference.epoch_expectation("python_heavy", meta, args.cache)
    heavy_reference = {"count": expected["count"], "digest": expected["digest"],
                       "batches": -(-expected["count"] // common.TEXT_BATCH)}
    watchdog = Watchdog(args.run_timeout)
    startup: list[str] = []
    with contextlib.ExitStack() as stack:
        clusters = {}
        for workers in (1, 2):
            started = time.perf_counter()
            # The first starts Ray (and ends it last); both clusters' workers must fit.
            clusters[workers] = stack.enter_context(fl.service.LocalCluster(
                num_workers=workers, ray_cpus=max(os.cpu_count() or 1, 3),
                log_to_driver=False))
            startup.append(f"{workers} worker{'s' if workers > 1 else ''}: "
                           f"{time.perf_counter() - started:.1f} s")
            log(f"cluster of {workers} started in {time.perf_counter() - started:.1f} s")
        one, two = clusters[1], clusters[2]
        variants = [
            Variant("heavy", "local, one process: `from_tensor_slices(lines).map(tokenize)"
                    ".batch(128)`", lambda: heavy_local(lines), local=True),
            Variant("heavy", "local, `map(tokenize, AUTOTUNE, executor=\"process\")` "
                    "(`./dev bench`'s feedline pipeline)", lambda: heavy_processes(meta)),
            Variant("heavy", "service, 1 worker", lambda: through(heavy_local(lines), one)),
            Variant("heavy", "service, 2 workers", lambda: through(heavy_local(lines), two)),
        ]
        for section, make in (("small", lambda: small_batches(small_count)),
                              ("large", lambda: large_batches(large_count))):
            variants += [
                Variant(section, "local", make, local=True),
                Variant(section, "service, 1 worker", lambda make=make: through(make(), one)),
                Variant(section, "service, 2 workers", lambda make=make: through(make(), two)),
            ]
        references = {"heavy": heavy_reference,
                      "small": overhead_reference(small_count, (SMALL_ROWS,)),
                      "large": overhead_reference(large_count, LARGE_SHAPE)}
        machine_before, tree_before, wall_before = machine_busy(), tree_cpu(), time.time()
        run_all(variants, args.rounds, watchdog, references, log)
        wall = time.time() - wall_before
        others = (machine_busy() - machine_before - (tree_cpu() - tree_before)) / wall
    notes = [payload_note(lines)]
    heavy_rows = _rows_of(variants, "heavy")
    by_label = {row["label"]: row for row in heavy_rows}
    scaling = None
    svc1, svc2 = by_label["service, 1 worker"], by_label["service, 2 workers"]
    if svc1["seconds"] and svc2["seconds"]:
        scaling = _median(svc1["seconds"]) / _median(svc2["seconds"])
    result: dict[str, Any] = {
        "command": " ".join(["python -m benchmarks.service",
                             *(sys.argv[1:] if argv is None else argv)]),
        "machine": f"{platform.machine()}, {cores} CPUs (os.cpu_count() {os.cpu_count()})",
        "cores": cores,
        "date": time.strftime("%Y-%m-%d"),
        "ray": ray.__version__,
        "revision": code_revision,
        "python": platform.python_version(),
        "mode": MODE,
        "rounds": args.rounds,
        "startup": ", ".join(startup),
        "load": (load_start, os.getloadavg()[0]),
        "others": max(0.0, others),
        "heavy": {"lines": lines_count, "rows": heavy_rows, "scaling": scaling,
                  "check_us": _check_us(variants, "heavy")},
        "notes": notes,
        "overhead": [
            {"name": f"`range(n).map(np.full({SMALL_ROWS}, i, int64))`, {small_count:,} "
                     "batches of 2 KiB", "rows": _rows_of(variants, "small"),
             "check_us": _check_us(variants, "small")},
            {"name": f"`range(n).map(np.full((256, 1024), i, float32))`, {large_count:,} "
                     "batches of 1 MiB", "rows": _rows_of(variants, "large"),
             "check_us": _check_us(variants, "large")},
        ],
    }
    text = markdown(result)
    print(text)
    failed = any(v.problems for v in variants)
    if failed:
        print("!!! CORRECTNESS CHECK FAILED (or a pass raised or hung): see the table",
              file=sys.stderr)
    if args.write:
        RESULTS.write_text("# The service: GIL-bound scaling and per-batch overhead\n\n"
                           + text + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
