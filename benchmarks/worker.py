"""One benchmark run in its own process: ``python -m benchmarks.worker SPEC_FILE``.

Runs in the virtual environment of the system under test. Builds that system's pipeline for
the workload, then, depending on the mode:

- ``measure``: iterates one epoch, timing the first batch and the rest, and writes throughput,
  CPU seconds (this process and its worker processes), element count and digest;
- ``startup``: stops after the first batch;
- ``check``: saves the first batches (canonical order, no shuffle) as ``.npz``;
- ``feed``: one epoch consumed by the simulated trainer of ``benchmarks/feed.py``
  (throughput, fraction of time waiting for input, element count and digest).

The result is a JSON file at ``spec.out``; the parent measures peak memory from outside.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import sys
import time
import traceback
from typing import Any

from benchmarks.common import RunSpec, batch_digest, batch_leaves, batch_size_of


def cpu_seconds() -> float:
    """CPU time of this process, its live descendants and its reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    try:
        import psutil

        for child in psutil.Process().children(recursive=True):
            try:
                times = child.cpu_times()
                total += times.user + times.system
            except psutil.Error:
                pass  # exited between listing and reading: counted once reaped, or lost
    except ImportError:
        pass
    return total


def peak_rss_bytes() -> int:
    """Peak resident memory of this process since it started this program (``VmHWM``).

    ``ru_maxrss`` would not do: it survives ``exec`` and so includes the parent's memory
    at the time it forked this process.
    """
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def rss_bytes() -> int:
    """Resident memory of this process now."""
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


DISTRIBUTIONS = {"feedline": "feedline", "tf": "tensorflow-cpu", "torch": "torch",
                 "grain": "grain"}


def _version(spec: RunSpec) -> str:
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTIONS[spec.system])
    except (metadata.PackageNotFoundError, KeyError):
        return "unknown"


def run(spec: RunSpec) -> dict[str, Any]:
    from benchmarks.systems import SYSTEMS

    system = importlib.import_module(f"benchmarks.systems.{SYSTEMS[spec.system][0]}")
    # Imports are done before the clock starts: startup means building the pipeline and
    # producing its first batch, not loading the library.
    system.prepare(spec)
    if spec.mode == "feed":
        return run_feed(system, spec)
    unbatched = spec.workload == "shuffle_memory"
    gc.collect()
    baseline_rss = rss_bytes()
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()
    iterable = system.build(spec)
    iterator = iter(iterable)
    saved: list[list[Any]] = []
    count = batches = 0
    digest = 0.0
    t_first = None
    capped = False
    max_seconds = spec.extra.get("max_seconds")
    try:
        for batch in iterator:
            if unbatched:
                batch = batch_leaves(batch)[0][None]
            if t_first is None:
                t_first = time.perf_counter()
            batches += 1
            count += batch_size_of(batch)
            if spec.mode == "check":
                saved.append(batch_leaves(batch))
                if len(saved) >= spec.check_batches:
                    break
            else:
                digest += batch_digest(batch)
                if spec.mode == "startup":
                    break
                if max_seconds and time.perf_counter() - t0 > max_seconds:
                    capped = True
                    break
        t_end = time.perf_counter()
        cpu1 = cpu_seconds()
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
        system.cleanup(iterable, iterator)
    if t_first is None:
        raise RuntimeError("the pipeline produced no batch")
    result: dict[str, Any] = {
        "elements": count, "batches": batches, "digest": digest,
        "first_batch_s": t_first - t0, "total_s": t_end - t0, "cpu_s": cpu1 - cpu0,
        "capped": capped, "baseline_rss": baseline_rss, "notes": system.notes(spec), "version": _version(spec),
    }
    # Throughput counts from building the pipeline to the last batch: work a pipeline does in
    # the background before its first batch is not free. The rate after the first batch is
    # kept too, for pipelines whose start-up matters less in long epochs.
    total = t_end - t0
    result["throughput"] = count / total if total > 0 and spec.mode == "measure" else None
    steady = t_end - t_first
    first_size = count / batches if batches else 0
    result["steady_throughput"] = ((count - first_size) / steady
                                   if steady > 0 and batches > 1 else None)
    if spec.mode == "check":
        import numpy as np

        arrays = {f"b{i}_l{j}": leaf for i, leaves in enumerate(saved)
                  for j, leaf in enumerate(leaves)}
        np.savez(spec.out + ".npz", **arrays)
    return result


def run_feed(system: Any, spec: RunSpec) -> dict[str, Any]:
    """One epoch through the simulated trainer (``spec.extra``: ``gil_ms``, ``sleep_ms``,
    ``iterations``, ``max_seconds``)."""
    import numpy as np

    from benchmarks import feed

    step = feed.Step(float(spec.extra["gil_ms"]), float(spec.extra["sleep_ms"]),
                     int(spec.extra["iterations"]), float(spec.extra.get("digest_ms", 0.0)))
    made: dict[str, Any] = {}

    def make_iterator() -> Any:
        made["iterable"] = system.build(spec)
        made["iterator"] = iter(made["iterable"])
        return made["iterator"]

    gc.collect()
    baseline_rss = rss_bytes()
    cpu0 = cpu_seconds()
    try:
        result = feed.train(make_iterator, step, batch_size_of, batch_digest,
                            max_seconds=spec.extra.get("max_seconds"))
        cpu1 = cpu_seconds()
        # A copy: the batch may live in memory the loader frees when it closes.
        sample = ([np.array(leaf, copy=True) for leaf in batch_leaves(result.last)]
                  if result.last is not None else None)
        result.last = None
    finally:
        iterator = made.get("iterator")
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
        if "iterable" in made:
            system.cleanup(made["iterable"], iterator)
    if sample is None:
        raise RuntimeError("the pipeline produced no batch")
    batch = feed.BATCH[spec.workload]
    alone = feed.trainer_alone(sample, step, batch_digest) * batch
    total = result.total_s
    return {
        "elements": result.elements, "batches": result.batches, "digest": result.digest,
        "first_batch_s": result.first_batch_s, "total_s": total, "cpu_s": cpu1 - cpu0,
        "capped": result.capped, "baseline_rss": baseline_rss, "notes": system.notes(spec),
        "version": _version(spec),
        "throughput": result.elements / total if total > 0 else None,
        "waited": result.waited, "steady_waited": result.steady_waited,
        "waited_s": result.waited_s, "steps_s": result.steps_s,
        "limit": step.limit(batch), "trainer_alone": alone,
        "gil_ms": step.gil_ms, "sleep_ms": step.sleep_ms, "iterations": step.iterations,
        "digest_ms": step.digest_ms,
    }


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        spec = RunSpec.from_json(f.read())
    try:
        result = {"ok": True, **run(spec)}
    except BaseException as error:  # noqa: BLE001 - every failure is reported, none hidden
        result = {"ok": False, "error": f"{type(error).__name__}: {error}",
                  "traceback": traceback.format_exc()}
    result["peak_rss_self"] = peak_rss_bytes()
    with open(spec.out, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    # Some libraries leave non-daemon threads or worker processes behind; the measurement is
    # written, so leave at once rather than hang in interpreter shutdown.
    os._exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main(sys.argv)
