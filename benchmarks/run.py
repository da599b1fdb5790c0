"""Run the side-by-side benchmarks: ``./dev bench [workload ...] [options]``.

Steps: make the peers' virtual environments (not timed), generate the data once into
``benchmarks/.cache``, check every system's output against a NumPy reference, then run every
(system, variant) on every workload in its own process, alternating A B C A B C over
``--rounds`` rounds, and report medians as a Markdown table (stdout), ``results.json`` and
``RESULTS.md``. Exits non-zero when a correctness check fails.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import data as data_mod
from benchmarks import envs, feed, reference, report
from benchmarks.common import RunSpec
from benchmarks.systems import EXTRA_VARIANTS, ONLY_FOR, SWITCHABLE, SYSTEMS, WORKER_COUNTED

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORKLOADS = ["chess", "images", "images_tfrecord", "overhead", "python_heavy", "startup",
             "feed", "shuffle_memory"]
EXTRAS = ["core", "formats", "scaling"]
# Run only when named: ``./dev bench sweep`` (worker counts 1 … all cores).
OPT_IN = ["sweep"]
ALIASES = {"python-heavy": "python_heavy", "images-tfrecord": "images_tfrecord", "shuffle-memory": "shuffle_memory",
           "shuffle": "shuffle_memory", "memory": "shuffle_memory",
           "core_throughput": "core", "core-throughput": "core"}
# Workloads whose work is the same for every variant: only the first variant runs.
ONE_VARIANT = {"shuffle_memory"}
STARTUP_OF = ("chess", "images")
FEED_OF = feed.FEED_SOURCES
SWEEP_OF = ("chess", "images")
SAMPLE_INTERVAL_S = 0.1


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="./dev bench", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", metavar="workload",
                        help=f"any of {', '.join(WORKLOADS + EXTRAS + OPT_IN)} (default: "
                             f"all but {', '.join(OPT_IN)})")
    parser.add_argument("--small", action="store_true",
                        help="about a tenth of the default data sizes: a quick run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of A B C … (default 3)")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help="comma-separated systems (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--chess-records", type=int)
    parser.add_argument("--chess-files", type=int)
    parser.add_argument("--images", type=int, dest="image_count")
    parser.add_argument("--overhead-range", type=int)
    parser.add_argument("--text-lines", type=int)
    parser.add_argument("--shuffle-buffer-mib", type=int)
    parser.add_argument("--shuffle-data-mib", type=int)
    parser.add_argument("--check-batches", type=int, default=3,
                        help="batches compared with the reference per system (default 3)")
    parser.add_argument("--no-check", action="store_true", help="skip the correctness check")
    parser.add_argument("--max-seconds", type=float, default=15,
                        help="stop a timed run after this many seconds and report the "
                             "throughput so far (0: whole epochs; default %(default)s). Keeps "
                             "slow peers within the time budget.")
    parser.add_argument("--workers", default="1,2,3,4",
                        help="worker-process counts tried for the DataLoader and Grain expert "
                             "pipelines before the timed rounds; the fastest is used "
                             "(default %(default)s; one number: no tuning)")
    parser.add_argument("--tune-seconds", type=float, default=6,
                        help="length of each worker-count trial run (default %(default)s)")
    parser.add_argument("--feed-gil-ms", default=_step_default(0),
                        help="feed: pure-Python work holding the GIL per trainer step, in ms "
                             "of an idle interpreter ('chess=2,images=8' or one number for "
                             "both; default %(default)s)")
    parser.add_argument("--feed-sleep-ms", default=_step_default(1),
                        help="feed: time.sleep per trainer step (the accelerator), in ms "
                             "(default %(default)s)")
    parser.add_argument("--feed-seconds", type=float, default=6,
                        help="feed: repeat the data set (one iterator over its files repeated) "
                             "until the trainer would be busy this long at its limit, so that "
                             "--small runs are not all start-up (default %(default)s)")
    parser.add_argument("--feedline-processes", action=argparse.BooleanOptionalAction,
                        default=True,
                        help="also run feedline's pipelines for chess and images in worker "
                             "processes (Dataset.multiprocess(N), N tuned like the peers' "
                             "worker counts) (default: on)")
    parser.add_argument("--sweep-workers",
                        help="sweep: worker counts (default: 1 to all cores, "
                             f"here 1..{os.cpu_count()})")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds one run may take before it is reported as a timeout")
    parser.add_argument("--json", default=str(HERE / "results.json"), help="results file")
    parser.add_argument("--results-md", default=str(HERE / "RESULTS.md"),
                        help="Markdown report ('' to skip)")
    args = parser.parse_args(argv)
    chosen = []
    for name in args.workloads or WORKLOADS + EXTRAS:
        name = ALIASES.get(name, name)
        if name not in WORKLOADS + EXTRAS + OPT_IN:
            parser.error(f"unknown workload {name!r}: expected any of "
                         f"{', '.join(WORKLOADS + EXTRAS + OPT_IN)}")
        if name not in chosen:
            chosen.append(name)
    args.workloads = chosen
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    for system in args.systems:
        if system not in SYSTEMS:
            parser.error(f"unknown system {system!r}: expected any of {', '.join(SYSTEMS)}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    try:
        args.workers = [int(n) for n in args.workers.split(",") if n.strip()]
    except ValueError:
        parser.error(f"--workers must be comma-separated counts, got {args.workers!r}")
    if not args.workers or min(args.workers) < 1:
        parser.error("--workers needs at least one count, each at least 1")
    try:
        gil = feed.parse_step_ms(args.feed_gil_ms, "--feed-gil-ms")
        sleep = feed.parse_step_ms(args.feed_sleep_ms, "--feed-sleep-ms")
    except ValueError as error:
        parser.error(str(error))
    args.feed_ms = {name: (gil.get(name, feed.DEFAULT_STEP_MS[name][0]),
                           sleep.get(name, feed.DEFAULT_STEP_MS[name][1]))
                    for name in FEED_OF}
    try:
        args.sweep_workers = ([int(n) for n in args.sweep_workers.split(",") if n.strip()]
                              if args.sweep_workers else
                              list(range(1, (os.cpu_count() or 1) + 1)))
    except ValueError:
        parser.error(f"--sweep-workers must be comma-separated counts, got "
                     f"{args.sweep_workers!r}")
    if not args.sweep_workers or min(args.sweep_workers) < 1:
        parser.error("--sweep-workers needs at least one count, each at least 1")
    return args


def tuned_name(system: str, variant: str) -> str:
    """The name a worker count is tuned and reported under: the system for its expert (or
    ``processes``) variant, else the system and variant (two variants of one system, e.g.
    DataLoader's and torchvision's image paths, each get their own count).

    Example:
        >>> tuned_name("torch", "expert"), tuned_name("torch", "torchvision")
        ('torch', 'torch (torchvision)')
    """
    return system if variant in ("expert", "processes") else f"{system} ({variant})"


def _step_default(index: int) -> str:
    return ",".join(f"{name}={ms[index]:g}" for name, ms in feed.DEFAULT_STEP_MS.items())


def sizes_from(args: argparse.Namespace) -> data_mod.Sizes:
    base = data_mod.Sizes.small() if args.small else data_mod.Sizes()
    overrides = {
        "chess_records": args.chess_records, "chess_files": args.chess_files,
        "images": args.image_count, "overhead_range": args.overhead_range,
        "text_lines": args.text_lines, "shuffle_buffer_mib": args.shuffle_buffer_mib,
        "shuffle_data_mib": args.shuffle_data_mib,
    }
    import dataclasses

    return dataclasses.replace(base, **{k: v for k, v in overrides.items() if v is not None})


# ----------------------------------------------------------------------------- child runs
def _tree_memory(pid: int) -> int:
    """Sum of the proportional set size (RSS if unavailable) of ``pid`` and its descendants."""
    import psutil

    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for process in processes:
        try:
            try:
                total += process.memory_full_info().pss
            except (psutil.AccessDenied, AttributeError):
                total += process.memory_info().rss
        except psutil.Error:
            pass
    return total


def _kill_tree(pid: int) -> None:
    import psutil

    try:
        victims = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return
    for victim in victims:
        try:
            victim.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass


def run_child(python: str, spec: RunSpec, timeout: float, log_dir: Path,
              tag: str = "") -> dict[str, Any]:
    """Run one worker process; its result plus the peak memory sampled from outside.

    Its output goes to ``log_dir/<workload>-<system>-<variant>-<mode><tag>.log``.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    fd, out = tempfile.mkstemp(prefix="bench-", suffix=".json", dir=log_dir)
    os.close(fd)
    spec.out = out
    # The spec travels in a file: with thousands of file names it exceeds one argument's limit.
    spec_path = out + ".spec"
    Path(spec_path).write_text(spec.to_json())
    log_path = log_dir / f"{spec.workload}-{spec.system}-{spec.variant}-{spec.mode}{tag}.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONUNBUFFERED": "1"}
    started = time.perf_counter()
    with open(log_path, "w") as log:
        process = subprocess.Popen([python, "-m", "benchmarks.worker", spec_path],
                                   cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        peak = 0
        timed_out = False
        while True:
            pid, _status = os.waitpid(process.pid, os.WNOHANG)
            if pid:
                process.returncode = 0  # reaped here; keep Popen from waiting again
                break
            peak = max(peak, _tree_memory(process.pid))
            if time.perf_counter() - started > timeout:
                timed_out = True
                _kill_tree(process.pid)
            time.sleep(SAMPLE_INTERVAL_S)
    wall = time.perf_counter() - started
    result: dict[str, Any]
    try:
        with open(out) as f:
            result = json.load(f)
    except (OSError, ValueError):
        tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
        result = {"ok": False,
                  "error": ("timeout" if timed_out else "crashed") + ": " + " / ".join(tail)}
    finally:
        Path(out).unlink(missing_ok=True)
        Path(spec_path).unlink(missing_ok=True)
    if timed_out:
        result = {"ok": False, "error": f"timeout (> {timeout:.0f} s)"}
    if not result.get("ok") and "traceback" in result:
        with open(log_path, "a") as log:
            log.write(result["traceback"])
        result["error"] = f"{result.get('error', 'failed')[:200]} (log: {log_path})"
    # Not the child's ru_maxrss: it counts the memory this parent had when it forked.
    result["peak_rss"] = max(peak, result.get("peak_rss_self", 0))
    result["wall_s"] = wall
    result["npz"] = out + ".npz" if spec.mode == "check" else None
    return result


# ----------------------------------------------------------------------------- main
class Bench:
    """One invocation: environments, data, checks, timed rounds and reports."""

    def __init__(self, args: argparse.Namespace, argv: list[str]) -> None:
        self.args = args
        self.argv = argv
        self.sizes = sizes_from(args)
        self.cache = data_mod.CACHE
        self.logs = self.cache / "logs"
        self.envs: dict[str, envs.Environment] = {}
        self.data: dict[str, dict[str, Any]] = {}
        self.records: list[dict[str, Any]] = []
        self.check_status: dict[tuple[str, str, str], str] = {}
        self.check_lines: list[str] = []
        self.failed_checks = 0
        self.workers: dict[tuple[str, str], int] = {}
        # (system, variant) -> why it cannot run here (a module it needs does not import).
        self.unavailable: dict[tuple[str, str], str] = {}
        self.tuning: list[dict[str, Any]] = []
        self.sweep_records: list[dict[str, Any]] = []
        self.feed_steps: dict[str, feed.Step] = {}
        self.feed_epochs: dict[str, int] = {}
        self.feed_calibration: float | None = None

    def enabled(self, system: str, variant: str, workload: str) -> bool:
        """Whether ``variant`` of ``system`` runs ``workload`` in this invocation."""
        if workload in ONLY_FOR.get((system, variant), (workload,)):
            return (system, variant) not in SWITCHABLE or bool(self.args.feedline_processes)
        return False

    def configs(self, workload: str, feed_mode: bool = False) -> list[tuple[str, str]]:
        """The (system, variant) pairs of ``workload``: every variant, or for ``feed`` (and
        the sweep) each system's expert one (feedline: recommended and, if enabled,
        processes), without the extra image paths (``EXTRA_VARIANTS``)."""
        out = []
        for system in self.args.systems:
            variants = [v for v in SYSTEMS[system][1] if self.enabled(system, v, workload)]
            if workload in ONE_VARIANT:
                variants = variants[:1]
            elif feed_mode:
                variants = [v for v in variants
                            if v != "naive" and (system, v) not in EXTRA_VARIANTS]
            out.extend((system, variant) for variant in variants)
        return out

    def measured(self) -> list[str]:
        """Workloads with their own timed runs (startup reuses chess/images when both run)."""
        return [w for w in self.args.workloads if w in WORKLOADS
                and w not in ("startup", "feed")]

    def feed_sources(self) -> list[str]:
        return list(FEED_OF) if "feed" in self.args.workloads else []

    def sweep_sources(self) -> list[str]:
        return list(SWEEP_OF) if "sweep" in self.args.workloads else []

    def startup_only(self) -> list[str]:
        """Workloads measured only to the first batch (``startup`` without them)."""
        if "startup" not in self.args.workloads:
            return []
        return [w for w in STARTUP_OF if w not in self.args.workloads]

    def data_workloads(self) -> list[str]:
        chosen = self.measured()
        for extra in self.startup_only() + self.feed_sources() + self.sweep_sources():
            if extra not in chosen:
                chosen.append(extra)
        return chosen

    # ------------------------------------------------------------------ steps
    def setup_environments(self) -> None:
        for system in self.args.systems:
            self.envs[system] = envs.ensure(system)
            env = self.envs[system]
            state = env.python if env.error is None else f"UNAVAILABLE: {env.error}"
            print(f"[bench] {system}: {state}", file=sys.stderr, flush=True)
            if env.python is None:
                continue
            for variant in SYSTEMS[system][1]:
                if not any(self.enabled(system, variant, w) for w in self.data_workloads()):
                    continue
                problem = envs.variant_problem(system, variant, env.python)
                if problem is not None:
                    self.unavailable[(system, variant)] = problem
                    print(f"[bench] {system} ({variant}): UNAVAILABLE: {problem}",
                          file=sys.stderr, flush=True)

    def generate_data(self) -> None:
        decoder = self.choose_decoder()
        for workload in self.data_workloads():
            t0 = time.perf_counter()
            described = data_mod.describe(workload, self.sizes, self.args.seed, self.cache)
            if workload in ("images", "images_tfrecord"):
                described = {**described, "decoder": decoder}
            self.data[workload] = described
            print(f"[bench] data for {workload} ready ({time.perf_counter() - t0:.1f} s)",
                  file=sys.stderr, flush=True)

    def choose_decoder(self) -> str:
        """simplejpeg if every available environment has it (fastest), else Pillow."""
        pythons = [e.python for e in self.envs.values() if e.python]
        if data_mod.available_decoder() == "simplejpeg" and all(
                envs.can_import(p, "simplejpeg") for p in pythons):
            return "simplejpeg"
        return "pillow"

    def extra_for(self, system: str, variant: str, workload: str) -> dict[str, Any]:
        """Options of a run beyond the spec's fields (the tuned worker count)."""
        chosen = self.workers.get((tuned_name(system, variant), workload))
        counted = workload in WORKER_COUNTED.get((system, variant), ())
        return {"workers": chosen} if chosen and counted else {}

    def tuning_data(self, workload: str) -> dict[str, Any]:
        """The data of the worker-count trials: repeated up to the default size, so that
        with ``--small`` a trial measures the steady rate rather than the start-up."""
        meta = self.data[workload]
        full = {"chess": data_mod.Sizes().chess_records, "images": data_mod.Sizes().images,
                "images_tfrecord": data_mod.Sizes().images}
        if workload not in full or "files" not in meta:
            return meta
        return feed.repeat_data(meta, max(1, -(-full[workload] // meta["count"])))

    def tune_workers(self) -> None:
        """Pick the fastest worker count of each tunable (system, workload), as an expert
        would (DataLoader, Grain, and feedline's ``processes`` variant when enabled)."""
        from tqdm import tqdm

        counted = [(s, v, w) for (s, v), workloads in WORKER_COUNTED.items()
                   for w in workloads if self.enabled(s, v, w)]
        if len(self.args.workers) == 1:
            for system, variant, workload in counted:
                self.workers[(tuned_name(system, variant), workload)] = self.args.workers[0]
            return
        # The sweep runs every count itself: only the timed workloads need a choice.
        timed = self.measured() + self.startup_only() + self.feed_sources()
        jobs = [(s, v, w, n) for s, v, w in counted if w in timed and w in self.data
                and s in self.args.systems and self.envs[s].python
                and (s, v) not in self.unavailable for n in self.args.workers]
        rates: dict[tuple[str, str], dict[int, float]] = {}
        for system, variant, workload, n in tqdm(jobs, desc="tuning worker counts",
                                                 leave=False):
            spec = RunSpec(system, variant, workload, "measure", self.tuning_data(workload),
                           seed=self.args.seed,
                           extra={"workers": n, "max_seconds": self.args.tune_seconds})
            result = run_child(self.envs[system].python, spec, self.args.timeout, self.logs,
                               tag=f"-workers{n}")
            rate = result.get("throughput") if result.get("ok") else None
            name = tuned_name(system, variant)
            rates.setdefault((name, workload), {})[n] = rate or 0.0
            self.tuning.append({"system": name, "workload": workload, "workers": n,
                                "throughput": rate, "error": result.get("error")})
        for key, by_count in rates.items():
            self.workers[key] = max(by_count, key=lambda n: by_count[n])
            print(f"[bench] {key[0]} {key[1]}: num_workers={self.workers[key]} "
                  f"({', '.join(f'{n}: {r:,.0f}/s' for n, r in by_count.items())})",
                  file=sys.stderr, flush=True)

    def check(self) -> None:
        import numpy as np
        from tqdm import tqdm

        jobs = [(w, s, v) for w in self.data_workloads() for s, v in self.configs(w)]
        for workload, system, variant in tqdm(jobs, desc="correctness checks", leave=False):
            env = self.envs[system]
            if env.python is None:
                continue
            if (system, variant) in self.unavailable:
                self.check_lines.append(f"{workload}: {system} ({variant}): unavailable: "
                                        f"{self.unavailable[(system, variant)]}")
                continue
            spec = RunSpec(system, variant, workload, "check", self.data[workload],
                           seed=self.args.seed, check_batches=self.args.check_batches,
                           extra=self.extra_for(system, variant, workload))
            result = run_child(env.python, spec, self.args.timeout, self.logs)
            label = f"{workload}: {system} ({variant})"
            if not result.get("ok"):
                problem = f"run failed: {result.get('error')}"
            else:
                with np.load(result["npz"]) as npz:
                    found = _unpack_npz(npz)
                Path(result["npz"]).unlink(missing_ok=True)
                expected = reference.first_batches(workload, self.data[workload],
                                                   self.args.check_batches)
                problem = reference.compare_batches(workload, expected, found)
            if problem is None:
                self.check_lines.append(f"{label}: first {len(expected)} batches match the "
                                        "NumPy reference")
            else:
                self.failed_checks += 1
                self.check_status[(workload, system, variant)] = f"CHECK FAILED: {problem}"
                self.check_lines.append(f"**{label}: CHECK FAILED: {problem}**")
                print(f"\n[bench] !!! CORRECTNESS CHECK FAILED: {label}: {problem}\n",
                      file=sys.stderr, flush=True)

    def calibrate_feed(self) -> None:
        """The trainer's dispatch work: iterations of pure Python per ms, measured once here,
        so that every system's trainer does exactly the same work."""
        if not self.feed_sources() or self.feed_steps:
            return
        self.feed_calibration = feed.calibrate()
        for name, (gil_ms, sleep_ms) in self.args.feed_ms.items():
            step = feed.make_step(gil_ms, sleep_ms, self.feed_calibration,
                                  feed.digest_ms(name))
            self.feed_steps[name] = step
            if name in self.data:
                self.feed_epochs[name] = feed.epochs_for(
                    self.data[name]["count"], step.limit(feed.BATCH[name]),
                    self.args.feed_seconds)
        print(f"[bench] feed trainer: {self.feed_calibration:,.0f} iterations of dispatch "
              "work per ms; " + "; ".join(
                  f"{n}: {s.gil_ms:g} ms Python ({s.digest_ms:.2f} ms of it the digest) + "
                  f"{s.sleep_ms:g} ms sleep, limit {s.limit(feed.BATCH[n]):,.0f}/s, "
                  f"{self.feed_epochs.get(n, 1)} epoch(s)"
                  for n, s in self.feed_steps.items()), file=sys.stderr, flush=True)

    def feed_expectation(self, workload: str) -> dict[str, Any]:
        """The reference of ``workload`` over the feed run's repeated epochs."""
        one = reference.epoch_expectation(workload, self.data[workload], self.cache)
        k = self.feed_epochs.get(workload, 1)
        return {"count": one["count"] * k, "digest": one["digest"] * k,
                "values": one["values"] * k}

    def timed_run(self, workload: str, mode: str, round_index: int, system: str,
                  variant: str, extra: dict[str, Any], tag: str,
                  expectations: dict[str, dict[str, Any]],
                  data: dict[str, Any] | None = None) -> dict[str, Any]:
        """One timed run in its own process, its epoch checked against the reference."""
        env = self.envs[system]
        record = {"workload": workload, "system": system, "variant": variant,
                  "round": round_index, "mode": mode}
        if env.python is None:
            record.update(ok=False, error=f"unavailable: {env.error}")
            return record
        if (system, variant) in self.unavailable:
            record.update(ok=False, error=f"unavailable: {self.unavailable[(system, variant)]}")
            return record
        spec = RunSpec(system, variant, workload, mode,
                       self.data[workload] if data is None else data,
                       seed=self.args.seed + round_index,
                       extra={"max_seconds": self.args.max_seconds or None, **extra})
        result = run_child(env.python, spec, self.args.timeout, self.logs, tag=tag)
        record.update(result)
        if not result.get("ok"):
            print(f"\n[bench] {workload} {system} ({variant}) {mode} {tag.strip('-')} "
                  f"failed: {result.get('error')}\n", file=sys.stderr, flush=True)
        if result.get("capped"):
            expected = expectations[workload]["count"]
            record["notes"] = (f"{result.get('notes') or ''} capped at "
                               f"{self.args.max_seconds:g} s: "
                               f"{result['elements'] / expected:.0%} of the epoch").strip()
        if result.get("ok") and mode in ("measure", "feed") and not result.get("capped"):
            problem = reference.compare_epoch(workload, expectations[workload],
                                              result["elements"], result["digest"])
            if problem is not None:
                record.update(ok=False, error=f"WRONG OUTPUT: {problem}")
                self.failed_checks += 1
                print(f"\n[bench] !!! WRONG OUTPUT: {workload} {system} ({variant}) {mode}: "
                      f"{problem}\n", file=sys.stderr, flush=True)
        return record

    def measure(self) -> None:
        from tqdm import tqdm

        self.calibrate_feed()
        plan = []
        for workload in self.measured() + self.startup_only():
            mode = "startup" if workload in self.startup_only() else "measure"
            for round_index in range(self.args.rounds):
                for system, variant in self.configs(workload):
                    plan.append((workload, mode, round_index, system, variant))
        for round_index in range(self.args.rounds):
            for workload in self.feed_sources():
                for system, variant in self.configs(workload, feed_mode=True):
                    plan.append((workload, "feed", round_index, system, variant))
        expectations = {w: reference.epoch_expectation(w, self.data[w], self.cache)
                        for w in self.measured()}
        feed_expectations = {w: self.feed_expectation(w) for w in self.feed_sources()}
        bar = tqdm(plan, desc="benchmark runs", leave=False)
        for workload, mode, round_index, system, variant in bar:
            bar.set_postfix_str(f"{workload} {mode} {system}/{variant} r{round_index + 1}")
            extra = dict(self.extra_for(system, variant, workload))
            data = None
            if mode == "feed":
                step = self.feed_steps[workload]
                extra.update(gil_ms=step.gil_ms, sleep_ms=step.sleep_ms,
                             iterations=step.iterations, digest_ms=step.digest_ms)
                data = feed.repeat_data(self.data[workload], self.feed_epochs[workload])
            tag = ("-feed" if mode == "feed" else "") + f"-round{round_index + 1}"
            record = self.timed_run(workload, mode, round_index, system, variant, extra, tag,
                                    feed_expectations if mode == "feed" else expectations,
                                    data)
            if mode == "feed":
                record["epochs"] = self.feed_epochs[workload]
            if record.get("ok") and workload == "shuffle_memory":
                buffer = self.data[workload]["buffer"] * self.data[workload]["element_bytes"]
                record["memory_over_buffer"] = (
                    (record["peak_rss"] - record["baseline_rss"]) / buffer)
            self.records.append(record)

    def sweep_plan(self) -> list[tuple[int, str, str, str, int | None]]:
        """(round, workload, system, variant, workers) of the sweep, A B C … per round.

        Variants with a worker count run every count of ``--sweep-workers``; each other
        system's expert (or recommended) variant runs once per round, for reference.
        """
        plan: list[tuple[int, str, str, str, int | None]] = []
        for round_index in range(self.args.rounds):
            for workload in self.sweep_sources():
                for system, variant in self.configs(workload, feed_mode=True):
                    if workload in WORKER_COUNTED.get((system, variant), ()):
                        plan.extend((round_index, workload, system, variant, n)
                                    for n in self.args.sweep_workers)
                    else:
                        plan.append((round_index, workload, system, variant, None))
        return plan

    def sweep(self) -> None:
        """``./dev bench sweep``: throughput of chess and images for every worker count."""
        from tqdm import tqdm

        plan = self.sweep_plan()
        expectations = {w: reference.epoch_expectation(w, self.data[w], self.cache)
                        for w in self.sweep_sources()}
        bar = tqdm(plan, desc="worker-count sweep", leave=False)
        for round_index, workload, system, variant, n in bar:
            bar.set_postfix_str(f"{workload} {system}/{variant} workers={n} r{round_index + 1}")
            extra = {"workers": n} if n else {}
            tag = f"-sweep{n or ''}-round{round_index + 1}"
            record = self.timed_run(workload, "measure", round_index, system, variant, extra,
                                    tag, expectations)
            record["workers"] = n
            self.sweep_records.append(record)

    # ------------------------------------------------------------------ reports
    def rows(self) -> dict[str, list[report.Row]]:
        out: dict[str, list[report.Row]] = {}
        for workload in self.args.workloads:
            if workload not in WORKLOADS:
                continue
            sources = {"startup": STARTUP_OF, "feed": FEED_OF}.get(workload, (workload,))
            for source in sources:
                if workload in ("startup", "feed"):
                    name, kind = f"{workload} ({source})", f"{workload}_{source}"
                else:
                    name = kind = source
                modes = {"startup": ("measure", "startup"), "feed": ("feed",)}.get(
                    workload, ("measure",))
                kind = "startup" if workload == "startup" else kind
                rows = []
                for system, variant in self.configs(source, feed_mode=workload == "feed"):
                    records = [r for r in self.records if r["workload"] == source
                               and r["system"] == system and r["variant"] == variant
                               and r.get("mode", "measure") in modes]
                    if workload == "startup":
                        records = [{**r, "throughput": None} for r in records]
                    status = self.check_status.get((source, system, variant), "ok")
                    row = report.summarize(records, kind, system, variant, status)
                    if not records and status == "ok":
                        row.status = "not run"
                    row.workload = kind
                    rows.append(row)
                out[name] = rows
        return out

    def run_extra(self, name: str) -> dict[str, Any]:
        """Run ``benchmarks/core_throughput.py``, ``formats.py`` or ``scaling.py`` in the .venv."""
        module = {"core": "benchmarks.core_throughput", "formats": "benchmarks.formats",
                  "scaling": "benchmarks.scaling"}[name]
        fd, out = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        extra = ["--small"] if self.args.small else []
        if name in ("formats", "scaling"):
            extra += ["--chess-data", self.data_for_formats()]
        command = [sys.executable, "-m", module, "--json", out, *extra]
        result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            with open(out) as f:
                payload = json.load(f)
        except (OSError, ValueError):
            payload = {"ok": False, "markdown": f"**{name} failed**: "
                       f"{(result.stderr or result.stdout).strip()[-500:]}"}
        finally:
            Path(out).unlink(missing_ok=True)
        return payload

    def data_for_formats(self) -> str:
        """The chess data folder for the formats benchmark (generated if needed)."""
        meta = self.data.get("chess") or data_mod.describe("chess", self.sizes, self.args.seed,
                                                           self.cache)
        return str(Path(meta["files"][0]).parent)

    def main(self) -> int:
        started = time.perf_counter()
        date = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        host = report.machine()
        if self.data_workloads():
            self.setup_environments()
            self.generate_data()
            self.tune_workers()
            if not self.args.no_check:
                self.check()
            self.measure()
            if self.sweep_sources():
                self.sweep()
        rows = self.rows()
        table = report.markdown(rows) if rows else ""
        sections = [report.tuning_markdown(self.tuning, self.workers)] if self.tuning else []
        if self.sweep_records:
            sections.append("\n" + report.sweep_markdown(self.sweep_records,
                                                          self.args.sweep_workers))
        extras: dict[str, Any] = {}
        for name in (w for w in self.args.workloads if w in EXTRAS):
            print(f"[bench] running {name} ...", file=sys.stderr, flush=True)
            extras[name] = self.run_extra(name)
            sections.append("\n" + extras[name].get("markdown", ""))
        elapsed = time.perf_counter() - started
        host["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
        command = "./dev bench " + shlex.join(self.argv)
        versions = self.versions()
        print(table)
        for section in sections:
            print(section)
        print(f"\n(total {elapsed / 60:.1f} min)")
        payload = {"date": date, "machine": host, "command": command.strip(),
                   "sizes": self.sizes.__dict__, "rounds": self.args.rounds,
                   "elapsed_s": elapsed, "versions": versions, "checks": self.check_lines,
                   "failed_checks": self.failed_checks, "worker_tuning": self.tuning,
                   "feed": {"iterations_per_ms": self.feed_calibration,
                            "steps": {k: v.__dict__ for k, v in self.feed_steps.items()},
                            "epochs": self.feed_epochs},
                   "sweep": [{k: v for k, v in r.items() if k != "traceback"}
                             for r in self.sweep_records],
                   "rows": {k: [r.__dict__ for r in v] for k, v in rows.items()},
                   "records": [{k: v for k, v in r.items() if k != "traceback"}
                               for r in self.records],
                   "extras": extras}
        with open(self.args.json, "w") as f:
            json.dump(payload, f, indent=1, default=str)
        if self.args.results_md:
            text = report.results_md(date, host, command.strip(), table, self.check_lines,
                                     sections + [f"\nTotal time: {elapsed / 60:.1f} min."],
                                     versions)
            Path(self.args.results_md).write_text(text)
        if self.failed_checks:
            print(f"[bench] {self.failed_checks} correctness problem(s): see above",
                  file=sys.stderr)
            return 1
        return 0

    def versions(self) -> dict[str, str]:
        found = {}
        for record in self.records:
            if record.get("version"):
                found.setdefault(record["system"], record["version"])
        return found


def _unpack_npz(npz: Any) -> list[list[Any]]:
    batches: dict[int, dict[int, Any]] = {}
    for key in npz.files:
        b, leaf = key[1:].split("_l")
        batches.setdefault(int(b), {})[int(leaf)] = npz[key]
    return [[leaves[j] for j in sorted(leaves)] for _, leaves in sorted(batches.items())]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("freethreaded", "free-threaded"):
        # Its own options (the free-threaded interpreter, settings, parts): issue 39.
        from benchmarks import freethreaded

        return freethreaded.main(argv[1:])
    args = parse_args(argv)
    return Bench(args, argv).main()


if __name__ == "__main__":
    sys.exit(main())
