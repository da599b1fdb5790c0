"""Free-threaded CPython (3.13t) side by side with the GIL build (issue 39).

Each workload runs in a fresh process of each interpreter, in interleaved rounds (A, B, C …
then C, B, A …, so that a shared machine's load falls on every setting alike):

- ``python_heavy``: ``from_tensor_slices(lines).map(tokenize).batch(128)``, the pure-Python
  tokenizer of :func:`benchmarks.common.tokenize` (the GIL-bound map);
- ``chess``: the tf.data-style pipeline of ``./dev bench`` (``TFRecordDataset → shuffle(10000)
  → batch(512) → map(parse + unpack) → prefetch``);
- ``images``: per-image ``map(read + decode + crop + flip + normalize) → batch(64) →
  prefetch`` with ``feedline.image``;
- ``images_pil``: the same with Pillow's JPEG decoder (:func:`pillow_augment`), which has
  free-threaded wheels where simplejpeg (feedline.image's decoder) has none.

Settings (``ft`` = the free-threaded interpreter, ``gil`` = the GIL build):

- ``inline``: every stage in the consumer's thread (no ``num_parallel_calls``, no prefetch);
- ``threadsN``: the map on ``N`` threads (``executor="thread"``), ``prefetch`` after it;
- ``default``: ``num_parallel_calls=AUTOTUNE`` and default options (placement decides:
  threads, or worker processes where it judges that better);
- ``processesN``: the default pipeline in ``N`` worker processes (``.multiprocess(N)``; for
  ``python_heavy``, ``executor="process"``);
- peers (the GIL build): ``torch``: PyTorch's DataLoader, ``num_workers=N`` (its only
  parallelism: processes), as ``./dev bench`` writes it (``systems/torch_sys.py``);
  ``grain``: Grain with ``N`` worker processes (``systems/grain_sys.py``), where installed.

Every feedline setting first runs one untimed *check* pass that hashes every element exactly
(an order-free multiset hash of the bytes of every leaf of every element): each must equal
``inline``'s on the same interpreter, and the free-threaded ``inline`` must equal the GIL
build's (the same pixels, the same tokens). Timed runs then carry the cheap digest of
``./dev bench`` and must match their check pass.

Memory: the parent follows each run's process tree every 20 ms and sums the peak resident
memory (``VmHWM``) of every process it saw, so that threads and worker processes compare on
the same measure. The trainer (``--trainer``): the chess pipeline with default options feeds a
simulated trainer in the same process (1.5 ms of Python CPU, no lock held, and 6.5 ms asleep
per batch): the fraction of its time spent waiting, and how many processes were started.
The scaling line (``--scaling``): CPU per element of each part on the free-threaded
interpreter, and the rate that predicts on 4 … 64 cores.

Run: ``python -m benchmarks.freethreaded --python /opt/py313t/bin/python3.13t`` (a venv with
NumPy, Pillow and feedline is made under ``benchmarks/.venvs/`` when that interpreter lacks
them); results are printed and, with ``--write``, written to
``benchmarks/RESULTS-freethreaded.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common

ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / "benchmarks" / ".venvs"
WORKLOADS = ("python_heavy", "chess", "images", "images_pil")
# What the free-threaded venv needs: NumPy 2.4 has cp313t wheels, google-crc32c 1.7.1 is the
# newest release with one (without its C extension feedline refuses TFRecord files).
FT_REQUIREMENTS = ["numpy<2.5", "pillow", "psutil", "google-crc32c==1.7.1"]
MASK = (1 << 64) - 1


# ----------------------------------------------------------------------------- hashing
def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, element-wise on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * np.uint64(0xBF58476D1CE4E5B9)
        x = x ^ (x >> np.uint64(27))
        x = x * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def element_hashes(batch: Any) -> np.ndarray:
    """One uint64 per element (row) of ``batch`` from the exact bytes of every leaf.

    Equal rows give equal hashes whatever the batching; a changed byte changes the hash.

    Example:
        >>> a = element_hashes({"x": np.arange(6).reshape(3, 2)})
        >>> b = element_hashes({"x": np.arange(6).reshape(3, 2)[::-1]})
        >>> sorted(a.tolist()) == sorted(b.tolist()), len(set(a.tolist()))
        (True, 3)
    """
    leaves = common.batch_leaves(batch)
    rows = leaves[0].shape[0] if leaves and leaves[0].ndim else 1
    total = np.zeros(rows, dtype=np.uint64)
    for index, leaf in enumerate(leaves):
        raw = np.ascontiguousarray(leaf).reshape(rows, -1).view(np.uint8)
        pad = (-raw.shape[1]) % 8
        if pad or raw.shape[1] == 0:
            raw = np.concatenate([raw, np.zeros((rows, pad or 8), np.uint8)], axis=1)
        words = raw.view(np.uint64)
        # Position-dependent weights: a permutation inside a row changes its hash.
        weights = _mix(np.arange(1, words.shape[1] + 1, dtype=np.uint64)
                       + np.uint64(index << 40)) | np.uint64(1)
        with np.errstate(over="ignore"):
            row = _mix((words * weights).sum(axis=1, dtype=np.uint64)
                       + np.uint64(words.shape[1]))
            total = total + _mix(row + np.uint64(index))
    return _mix(total)


def multiset_hash(batches_hashes: list[np.ndarray]) -> str:
    """An order-free hash of the elements of an epoch: the elements' hashes, sorted.

    Example:
        >>> multiset_hash([np.array([3, 1], np.uint64)]) == multiset_hash(
        ...     [np.array([1], np.uint64), np.array([3], np.uint64)])
        True
    """
    joined = (np.sort(np.concatenate(batches_hashes)) if batches_hashes
              else np.zeros(0, np.uint64))
    return hashlib.sha256(joined.tobytes()).hexdigest()[:16]


# ----------------------------------------------------------------------------- pipelines (child)
def _feedline_pipeline(workload: str, setting: str, data: dict[str, Any], seed: int) -> Any:
    """feedline's pipeline of ``workload`` in ``setting`` (see the module docstring)."""
    import feedline as fl

    from benchmarks.systems import feedline_sys

    workers = int(setting.removeprefix("processes")) if setting.startswith("processes") else 0
    threads = int(setting.removeprefix("threads")) if setting.startswith("threads") else 0
    if setting == "inline":
        kwargs: dict[str, Any] = {}
    elif threads:
        kwargs = {"num_parallel_calls": threads, "executor": "thread"}
    else:
        kwargs = {"num_parallel_calls": fl.AUTOTUNE}
    prefetch = setting != "inline"
    if workload == "python_heavy":
        from benchmarks.data import read_lines

        ds = fl.Dataset.from_tensor_slices(np.array(read_lines(data), dtype=object))
        if workers:
            kwargs = {"num_parallel_calls": workers, "executor": "process"}
        ds = ds.map(common.tokenize, **kwargs).batch(common.TEXT_BATCH)
        return ds.prefetch(fl.AUTOTUNE) if prefetch else ds
    if workload == "chess":
        features = {"d": fl.FixedLenFeature([], "bytes"), "s": fl.FixedLenFeature([], "int64")}

        def parse_batch(serialized: np.ndarray) -> dict[str, np.ndarray]:
            parsed = fl.parse_example(serialized, features)
            d = np.frombuffer(b"".join(parsed["d"]), dtype=np.uint8).reshape(
                len(serialized), -1)
            return common.chess_transform(d, parsed["s"])

        ds = fl.TFRecordDataset(data["files"]).shuffle(common.CHESS_SHUFFLE_BUFFER, seed=seed)
        ds = ds.batch(common.CHESS_BATCH).map(parse_batch, **kwargs)
    elif workload in ("images", "images_pil"):
        params = common.image_params(data)
        augment = feedline_sys.augment_one if workload == "images" else pillow_augment
        ds = fl.Dataset.from_tensor_slices(
            (np.array(data["files"]), params[:, 0], params[:, 1], params[:, 2]))
        ds = ds.map(lambda path, dy, dx, flip: augment(
            feedline_sys._read(path), dy, dx, flip), **kwargs).batch(common.IMAGE_BATCH)
    else:
        raise ValueError(f"unknown workload {workload!r}; expected one of {WORKLOADS}")
    if prefetch:
        ds = ds.prefetch(fl.AUTOTUNE)
    return ds.multiprocess(workers) if workers else ds


def pillow_augment(jpeg: bytes, dy: Any, dx: Any, flip: Any) -> np.ndarray:
    """:func:`benchmarks.systems.feedline_sys.augment_one` with Pillow's JPEG decoder
    (libjpeg-turbo, accurate IDCT) in place of feedline.image's (simplejpeg, which has no
    free-threaded wheel): crop, flip and normalize stay feedline.image's."""
    import io

    import feedline.image as image_ops
    from PIL import Image

    with Image.open(io.BytesIO(jpeg)) as decoded:
        image = np.asarray(decoded.convert("RGB"))
    crop = image_ops.crop_to_bounding_box(image, int(dy), int(dx), common.CROP, common.CROP)
    if flip:
        crop = image_ops.flip_left_right(crop)
    return image_ops.normalize(crop, common.IMAGENET_MEAN, common.IMAGENET_STD)


def _peer_pipeline(system: str, workload: str, setting: str, data: dict[str, Any],
                   seed: int) -> tuple[Any, Any]:
    """A peer's pipeline as ``./dev bench`` writes it (its ``expert`` variant)."""
    import importlib

    from benchmarks.common import RunSpec
    from benchmarks.systems import SYSTEMS

    module = importlib.import_module(f"benchmarks.systems.{SYSTEMS[system][0]}")
    workers = int(setting.removeprefix("workers"))
    spec = RunSpec(system, "expert", workload, "measure", data, seed=seed,
                   extra={"workers": workers})
    module.prepare(spec)
    return module.build(spec), module


def _where(iterator: Any) -> str:
    """Where each parallel map of ``iterator`` ran (its executor decision)."""
    from benchmarks.gil_map import _where as where

    try:
        return where(iterator)
    except Exception as error:  # noqa: BLE001 - a label only; the run's result stands
        return f"unknown ({type(error).__name__})"


def child(job: dict[str, Any]) -> dict[str, Any]:
    """One run in this process: ``check`` (exact hashes), ``measure`` or ``feed``."""
    forks = [0]
    os.register_at_fork(after_in_parent=lambda: forks.__setitem__(0, forks[0] + 1))
    system, workload, setting = job["system"], job["workload"], job["setting"]
    gil = getattr(sys, "_is_gil_enabled", lambda: True)
    if system == "feedline":
        import feedline  # noqa: F401 - imports before the clock, as worker.py does
        import feedline.image  # noqa: F401
    result: dict[str, Any] = {"python": sys.version.split()[0], "gil_after_import": gil()}
    if job["mode"] == "feed":
        return {**result, **_feed(job, gil, forks)}
    cpu0, t0 = time.process_time(), time.perf_counter()
    module = None
    if system == "feedline":
        iterable = _feedline_pipeline(workload, setting, job["data"], job["seed"])
    else:
        iterable, module = _peer_pipeline(system, workload, setting, job["data"], job["seed"])
    iterator = iter(iterable)
    count, digest, hashes = 0, 0.0, []
    first = None
    try:
        for batch in iterator:
            if first is None:
                first = time.perf_counter()
            count += common.batch_size_of(batch)
            digest += common.batch_digest(batch)
            if job["mode"] == "check":
                hashes.append(element_hashes(batch))
        ended = time.perf_counter()
        cpu = time.process_time() - cpu0
        where = _where(iterator) if system == "feedline" else ""
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
        if module is not None:
            module.cleanup(iterable, iterator)
    return {**result, "elements": count, "digest": digest, "seconds": ended - t0,
            "rate": count / (ended - t0), "cpu_s": cpu, "first_s": (first or ended) - t0,
            "where": where, "forks": forks[0], "gil_after_run": gil(),
            "hash": multiset_hash(hashes) if hashes else None}


def _feed(job: dict[str, Any], gil: Any, forks: list[int]) -> dict[str, Any]:
    """The chess pipeline, default options, feeding the simulated trainer in this process."""
    import multiprocessing

    from benchmarks import feed

    per_ms = feed.calibrate()
    step = feed.Step(job["trainer_cpu_ms"], job["trainer_sleep_ms"],
                     int(per_ms * job["trainer_cpu_ms"]))
    made: dict[str, Any] = {}

    def make_iterator() -> Any:
        made["it"] = iter(_feedline_pipeline("chess", "default", job["data"], job["seed"]))
        return made["it"]

    try:
        out = feed.train(make_iterator, step, common.batch_size_of, common.batch_digest)
        where = _where(made["it"])
        children = len(multiprocessing.active_children())
    finally:
        if "it" in made:
            made["it"].close()
    return {"elements": out.elements, "digest": out.digest, "seconds": out.total_s,
            "rate": out.elements / out.total_s, "waited": out.waited,
            "steady_waited": out.steady_waited, "first_s": out.first_batch_s,
            "limit": step.limit(common.CHESS_BATCH), "where": where, "forks": forks[0],
            "mp_children": children, "gil_after_run": gil(), "iterations": step.iterations}


# ----------------------------------------------------------------------------- scaling (child)
def scaling_child(job: dict[str, Any]) -> dict[str, Any]:
    """CPU seconds per element of each part, measured in this (free-threaded) process.

    - chess ``feeder`` (serial): read, shuffle and batch the records, one thread;
    - chess ``map`` (parallel): parse + unpack of a batch;
    - images ``map`` (parallel): read + decode + crop + flip + normalize of one image;
    - images ``batch`` (serial): stacking 64 float32 images into a batch;
    - ``engine`` (serial, per batch): the consumer's side of a parallel map: the threads2
      pipeline's CPU minus the parts' (measured, divided by elements).
    """
    import feedline as fl

    from benchmarks.systems import feedline_sys

    out: dict[str, Any] = {"gil": sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled")
                           else True}
    chess, images = job["chess"], job["images"]
    prefix = (fl.TFRecordDataset(chess["files"]).shuffle(common.CHESS_SHUFFLE_BUFFER, seed=1)
              .batch(common.CHESS_BATCH))
    t, n, batches = time.thread_time(), 0, []
    for batch in prefix:
        n += len(batch)
        if len(batches) < 20:
            batches.append(batch)
    out["chess_feeder"] = (time.thread_time() - t) / n
    features = {"d": fl.FixedLenFeature([], "bytes"), "s": fl.FixedLenFeature([], "int64")}
    t = time.thread_time()
    for _ in range(5):
        for batch in batches:
            parsed = fl.parse_example(batch, features)
            d = np.frombuffer(b"".join(parsed["d"]), dtype=np.uint8).reshape(len(batch), -1)
            common.chess_transform(d, parsed["s"])
    out["chess_map"] = (time.thread_time() - t) / (5 * sum(len(b) for b in batches))
    out["chess_bytes"] = 8 * 8 * 24 * 4 + 10 * 4 + 4 + common.CHESS_RECORD_BYTES
    for name, workload, data in (("chess", "chess", chess), ("images", "images", images)):
        pipeline = _feedline_pipeline(workload, "threads2", data, 1)
        cpu, count = time.process_time(), 0
        for batch in pipeline:
            count += common.batch_size_of(batch)
        out[f"{name}_threads2_total"] = (time.process_time() - cpu) / count
    params = common.image_params(images)
    files = images["files"][:100]
    t = time.thread_time()
    crops = [feedline_sys.augment_one(feedline_sys._read(f), *params[i])
             for i, f in enumerate(files)]
    out["images_map"] = (time.thread_time() - t) / len(files)
    t = time.thread_time()
    for start in range(0, len(crops) - common.IMAGE_BATCH + 1, common.IMAGE_BATCH // 2):
        np.stack(crops[start:start + common.IMAGE_BATCH])
    stacks = len(range(0, len(crops) - common.IMAGE_BATCH + 1, common.IMAGE_BATCH // 2))
    out["images_batch"] = (time.thread_time() - t) / (stacks * common.IMAGE_BATCH)
    # Bytes an image moves through memory: the JPEG (~20 kB), the decoded 320x320x3, the
    # cropped uint8 and float32 copies, the batch's copy, written once and read once each.
    out["images_bytes"] = 2 * (20_000 + 320 * 320 * 3 + 224 * 224 * 3 + 2 * 224 * 224 * 3 * 4)
    return out


# ----------------------------------------------------------------------------- parent
@dataclass
class Setting:
    """One row: an interpreter, a system and its setting."""

    interp: str  # "ft" or "gil"
    system: str  # "feedline", "torch", "grain"
    setting: str
    python: str = ""

    @property
    def label(self) -> str:
        who = "" if self.system == "feedline" else f"{self.system} "
        return f"{self.interp}:{who}{self.setting}"


@dataclass
class Outcome:
    """What the rounds of one setting measured."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    check: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from ``/proc/<pid>/task/*/children``."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as f:
                    todo.extend(int(p) for p in f.read().split())
        except OSError:
            continue  # ended between listing and reading
    return found


def _hwm(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def run_child(python: str, job: dict[str, Any], env: dict[str, str], timeout: float
              ) -> dict[str, Any]:
    """Run ``job`` in a fresh ``python`` process; its result plus the summed peak memory
    (VmHWM of every process of its tree, followed every 20 ms) and the processes seen."""
    proc = subprocess.Popen([python, "-m", "benchmarks.freethreaded", "--child",
                             json.dumps(job)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peaks: dict[int, int] = {}
    done = threading.Event()

    def follow() -> None:
        while not done.is_set():
            for pid in _tree(proc.pid):
                value = _hwm(pid)
                if value is not None:
                    peaks[pid] = max(peaks.get(pid, 0), value)
            done.wait(0.02)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        return {"ok": False, "error": f"timed out after {timeout:.0f} s", "stderr": stderr}
    finally:
        done.set()
        follower.join()
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"ok": False, "error": f"exit {proc.returncode}",
                "stderr": stderr[-3000:]}
    result = json.loads(lines[-1])
    result.update(ok=True, peak_bytes=sum(peaks.values()), processes=len(peaks),
                  warnings=[w for w in stderr.splitlines() if "Warning" in w][:3])
    return result


def ensure_ft_python(python: str) -> str:
    """An interpreter at ``python`` (or a venv made from it) that imports feedline."""
    probe = [python, "-c", "import numpy, PIL, feedline, feedline.image"]
    env = {**os.environ, "PYTHON_GIL": "0"}
    if subprocess.run(probe, cwd=ROOT, env=env, capture_output=True).returncode == 0:
        return python
    version = subprocess.run([python, "-c", "import sys; print(sys.abiflags, "
                              "sys.version_info[:2])"], capture_output=True, text=True)
    venv = VENVS / ("freethreaded-" + "".join(c for c in version.stdout if c.isalnum()))
    target = str(venv / "bin" / "python")
    if not Path(target).exists():
        print(f"making {venv} (NumPy, Pillow, feedline) ...", file=sys.stderr, flush=True)
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
    if subprocess.run([target, *probe[1:]], cwd=ROOT, env=env,
                      capture_output=True).returncode != 0:
        subprocess.run([target, "-m", "pip", "install", "-q", "--only-binary", ":all:",
                        *FT_REQUIREMENTS], check=True)
        subprocess.run([target, "-m", "pip", "install", "-q", "-e", str(ROOT)], check=True)
    return target


def _data(workload: str, args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks import data

    if workload == "python_heavy":
        return data.text(args.lines, args.seed)
    if workload == "chess":
        return data.chess(args.chess_records, 8, args.seed)
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; expected one of {WORKLOADS}")
    # ``images_pil`` reads the same files (the peers decode them as ``images``).
    return {**data.images(args.images, args.seed), "decoder": data.available_decoder()}


def settings_for(workload: str, args: argparse.Namespace, peers: dict[str, str]
                 ) -> list[Setting]:
    n = args.threads
    rows = [Setting("ft", "feedline", "inline", args.ft), Setting("ft", "feedline", f"threads{n}",
                                                                  args.ft),
            Setting("ft", "feedline", "default", args.ft),
            Setting("ft", "feedline", f"processes{n}", args.ft),
            Setting("gil", "feedline", "inline", args.gil),
            Setting("gil", "feedline", "default", args.gil),
            Setting("gil", "feedline", f"processes{n}", args.gil)]
    # The peers' chess pipelines read TFRecord through the ``tfrecord`` package, whose
    # generated protobuf code the installed protobuf refuses: chess runs without peers here.
    # Their images rows (their own decoder) are the peers of ``images_pil`` too.
    for system, python in (peers.items() if workload in ("python_heavy", "images") else ()):
        rows.append(Setting("gil", system, f"workers{n}", python))
    return rows


def _env(setting: Setting, args: argparse.Namespace) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHON_GIL", None)
    if setting.interp == "ft" and args.gil_off:
        env["PYTHON_GIL"] = "0"
    return env


def measure(workload: str, args: argparse.Namespace, peers: dict[str, str]
            ) -> tuple[list[Setting], dict[str, Outcome], list[str]]:
    """Check passes, then interleaved timed rounds, of every setting of ``workload``."""
    data = _data(workload, args)
    rows = settings_for(workload, args, peers)
    outcomes = {row.label: Outcome() for row in rows}
    problems: list[str] = []
    base = {"workload": workload, "data": data, "seed": args.seed}
    for row in rows:
        if row.system != "feedline":
            continue
        job = {**base, "system": row.system, "setting": row.setting, "mode": "check"}
        result = run_child(row.python, job, _env(row, args), args.timeout)
        outcomes[row.label].check = result
        if not result["ok"]:
            problems.append(f"{workload} {row.label}: check failed: {result['error']}\n"
                            f"{result.get('stderr', '')}")
    reference = outcomes["ft:inline"].check
    for row in rows:
        check = outcomes[row.label].check
        if row.system != "feedline" or not (check and check["ok"]):
            continue
        same_interp = outcomes[f"{row.interp}:inline"].check
        for other, name in ((same_interp, "inline on the same interpreter"),
                            (reference, "the free-threaded inline")):
            if other and other["ok"] and (check["hash"] != other["hash"]
                                          or check["elements"] != other["elements"]):
                problems.append(f"{workload} {row.label}: output differs from {name} "
                                f"({check['elements']} elements, hash {check['hash']} vs "
                                f"{other['elements']}, {other['hash']})")
    for round_ in range(args.rounds):
        for row in rows if round_ % 2 == 0 else rows[::-1]:
            job = {**base, "system": row.system, "setting": row.setting, "mode": "measure"}
            result = run_child(row.python, job, _env(row, args), args.timeout)
            outcome = outcomes[row.label]
            if not result["ok"]:
                outcome.errors.append(result["error"])
                problems.append(f"{workload} {row.label} round {round_ + 1}: "
                                f"{result['error']}\n{result.get('stderr', '')}")
                continue
            check = outcome.check
            if check and check["ok"] and (
                    result["elements"] != check["elements"]
                    or abs(result["digest"] - check["digest"])
                    > 1e-9 * max(1.0, abs(check["digest"]))):
                problems.append(f"{workload} {row.label} round {round_ + 1}: timed run's "
                                f"output differs from its check pass")
            outcome.runs.append(result)
            print(f"{workload:12s} round {round_ + 1} {row.label:22s} "
                  f"{result['rate']:10,.0f}/s  peak {result['peak_bytes'] / 2**20:7.0f} MiB "
                  f"procs {result['processes']} gil {result['gil_after_run']} "
                  f"{result.get('where', '')}", flush=True)
    return rows, outcomes, problems


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(workload: str, rows: list[Setting], outcomes: dict[str, Outcome]) -> list[str]:
    """Markdown rows: median rate, range, ratio to the free-threaded inline and to the best
    peer, peak memory, processes, where the map ran, the GIL state, the exact hash."""
    unit = {"python_heavy": "lines/s", "chess": "examples/s"}.get(workload, "images/s")
    rates = {label: [r["rate"] for r in o.runs] for label, o in outcomes.items()}
    inline = _median(rates.get("ft:inline", []))
    peers = [_median(v) for label, v in rates.items()
             if v and (" " in label.split(":", 1)[1])]
    best_peer = max(peers) if peers else float("nan")
    out = [f"| setting | {unit} (median) | min–max | × ft inline | × best peer | CPU µs/element "
           "| cores busy | peak RSS (sum VmHWM) | processes | map ran on | GIL on after run "
           "| exact hash |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for row in rows:
        o = outcomes[row.label]
        if not o.runs:
            error = (o.errors or [o.check.get("error") if o.check else "not run"])[0]
            out.append(f"| {row.label} | failed: {error} | | | | | | | | | | |")
            continue
        v = rates[row.label]
        med = _median(v)
        peak = _median([r["peak_bytes"] for r in o.runs]) / 2**20
        procs = max(r["processes"] for r in o.runs)
        where = "; ".join(sorted({r.get("where") or "–" for r in o.runs}))
        gil = "yes" if any(r.get("gil_after_run") for r in o.runs) else "no"
        digest = o.check["hash"] if o.check and o.check.get("ok") else "–"
        # CPU of the consumer process only (process_time): worker processes' CPU is not in
        # it, so the two columns are "–" for settings with workers.
        own = procs == 1
        cpu = (f"{_median([r['cpu_s'] / r['elements'] for r in o.runs]) * 1e6:.1f}"
               if own else "–")
        busy = f"{_median([r['cpu_s'] / r['seconds'] for r in o.runs]):.2f}" if own else "–"
        against_peer = f"{med / best_peer:.2f}" if peers else "–"
        out.append(f"| {row.label} | {med:,.0f} | {min(v):,.0f}–{max(v):,.0f} | "
                   f"{med / inline:.2f} | {against_peer} | {cpu} | {busy} | "
                   f"{peak:,.0f} MiB | {procs} | "
                   f"{where} | {gil} | {digest} |")
    return out


def trainer(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The trainer runs (``--trainer-rounds``), each in a fresh free-threaded process."""
    data = _data("chess", args)
    job = {"workload": "chess", "data": data, "seed": args.seed, "system": "feedline",
           "setting": "default", "mode": "feed", "trainer_cpu_ms": 1.5,
           "trainer_sleep_ms": 6.5}
    env = _env(Setting("ft", "feedline", "default"), args)
    results = []
    for round_ in range(args.trainer_rounds):
        result = run_child(args.ft, job, env, args.timeout)
        results.append(result)
        if result["ok"]:
            print(f"trainer round {round_ + 1}: waited {result['waited']:.1%} "
                  f"(after the first batch {result['steady_waited']:.1%}), "
                  f"{result['rate']:,.0f}/s of a {result['limit']:,.0f}/s limit, "
                  f"processes {result['processes']}, forks {result['forks']}, "
                  f"gil {result['gil_after_run']}, {result['where']}", flush=True)
        else:
            print(f"trainer round {round_ + 1}: {result['error']}\n{result.get('stderr')}",
                  flush=True)
    return results


def predict(serial: float, parallel: float, cores: int, bytes_per: float,
            bandwidth: float) -> float:
    """Elements/s on ``cores``: ``min(1 / serial, cores / (serial + parallel),
    bandwidth / bytes)``.

    Example:
        >>> round(predict(1e-6, 9e-6, 4, 1000, 1e9))
        400000
    """
    return min(1 / serial, cores / (serial + parallel), bandwidth / bytes_per)


def scaling(args: argparse.Namespace) -> dict[str, Any]:
    """Measure the parts on the free-threaded interpreter and predict 4 … 64 cores."""
    job = {"chess": _data("chess", args), "images": _data("images", args)}
    proc = subprocess.run([args.ft, "-m", "benchmarks.freethreaded", "--scaling-child",
                           json.dumps(job)], cwd=ROOT, capture_output=True, text=True,
                          env=_env(Setting("ft", "feedline", "inline"), args),
                          timeout=args.timeout)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.splitlines()[-1])


SCALING_CORES = (2, 4, 8, 16, 64)


def scaling_lines(parts: dict[str, Any], bandwidth: float) -> list[str]:
    if "error" in parts:
        return [f"scaling measurement failed: {parts['error']}"]
    chess_serial = parts["chess_feeder"]
    chess_engine = max(0.0, parts["chess_threads2_total"] - parts["chess_feeder"]
                       - parts["chess_map"])
    chess_parallel = parts["chess_map"] + chess_engine
    image_serial = parts["images_batch"]
    image_parallel = max(parts["images_map"],
                         parts["images_threads2_total"] - parts["images_batch"])
    lines = ["| workload | serial µs/element | parallel µs/element (incl. engine) | "
             "bytes/element | " + " | ".join(f"{c} cores" for c in SCALING_CORES) + " |",
             "|---|---:|---:|---:|" + "---:|" * len(SCALING_CORES)]
    for name, serial, parallel, nbytes in (
            ("chess", chess_serial, chess_parallel, parts["chess_bytes"]),
            ("images", image_serial, image_parallel, parts["images_bytes"])):
        cells = " | ".join(f"{predict(serial, parallel, c, nbytes, bandwidth):,.0f}"
                           for c in SCALING_CORES)
        lines.append(f"| {name} (3.13t threads) | {serial * 1e6:.1f} | {parallel * 1e6:.1f} | "
                     f"{nbytes:,} | {cells} |")
    lines.append("")
    lines.append(f"Measured parts (µs per element, thread CPU on this machine): "
                 + ", ".join(f"{k} {v * 1e6:.1f}" for k, v in parts.items()
                             if isinstance(v, float) and k != "gil"))
    return lines


def find_peers(args: argparse.Namespace) -> dict[str, str]:
    """Peers whose module imports in the given interpreters: ``{system: python}``."""
    found = {}
    for system, module, python in (("torch", "torch", args.gil),
                                   ("grain", "grain", args.grain_python)):
        if system not in args.peers or not python or not Path(python).exists():
            continue
        ok = subprocess.run([python, "-c", f"import {module}, feedline"], cwd=ROOT,
                            capture_output=True).returncode == 0
        if ok:
            found[system] = python
        else:
            print(f"peer {system}: not importable in {python}; left out", file=sys.stderr)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", dest="ft", default="/opt/py313t/bin/python3.13t",
                        help="the free-threaded interpreter (a venv is made if it lacks "
                        "NumPy/feedline)")
    parser.add_argument("--gil-python", dest="gil", default=sys.executable)
    parser.add_argument("--grain-python", default=str(VENVS / "grain" / "bin" / "python"),
                        help="a GIL-build interpreter with grain and feedline installed")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--peers", default="torch,grain")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--chess-records", type=int, default=40_000)
    parser.add_argument("--images", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--trainer-rounds", type=int, default=3)
    parser.add_argument("--bandwidth-gbs", type=float, default=40.0,
                        help="sustained memory bandwidth assumed for the scaling line")
    parser.add_argument("--no-gil-off", dest="gil_off", action="store_false",
                        help="do not set PYTHON_GIL=0 for the free-threaded runs")
    parser.add_argument("--parts", default="bench,trainer,scaling")
    parser.add_argument("--json", default="", help="write every run's record here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--scaling-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        os._exit(0)  # some peers leave threads behind; the result is printed
    if args.scaling_child:
        print(json.dumps(scaling_child(json.loads(args.scaling_child))), flush=True)
        return 0
    args.ft = ensure_ft_python(args.ft)
    parts = args.parts.split(",")
    started = time.time()
    load_before = os.getloadavg()
    report: dict[str, Any] = {"command": " ".join(sys.argv), "ft": args.ft, "gil": args.gil,
                              "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                              "load_before": load_before}
    problems: list[str] = []
    lines: list[str] = []
    if "bench" in parts:
        peers = find_peers(args)
        for workload in args.workloads.split(","):
            rows, outcomes, found = measure(workload, args, peers)
            problems += found
            lines += [f"### {workload}", "", *table(workload, rows, outcomes), ""]
            report[workload] = {label: {"runs": o.runs, "check": o.check, "errors": o.errors}
                                for label, o in outcomes.items()}
            if args.json:  # kept as it grows: a run cut short keeps what it measured
                Path(args.json).write_text(json.dumps(report, indent=1, default=str))
            print("\n".join(lines[-len(rows) - 5:]), flush=True)
    if "trainer" in parts:
        runs = trainer(args)
        report["trainer"] = runs
        ok = [r for r in runs if r["ok"]]
        if ok:
            lines += ["### trainer (chess, default options, 3.13t)", "",
                      f"waited (median of {len(ok)}): {_median([r['waited'] for r in ok]):.1%}"
                      f", after the first batch {_median([r['steady_waited'] for r in ok]):.1%}"
                      f"; rate {_median([r['rate'] for r in ok]):,.0f}/s of a "
                      f"{ok[0]['limit']:,.0f}/s limit; processes seen "
                      f"{max(r['processes'] for r in ok)}, forks "
                      f"{max(r['forks'] for r in ok)}, multiprocessing children "
                      f"{max(r['mp_children'] for r in ok)}; map: {ok[0]['where']}", ""]
    if "scaling" in parts:
        measured = scaling(args)
        report["scaling"] = measured
        lines += ["### scaling (3.13t threads; unverified on many cores)", "",
                  *scaling_lines(measured, args.bandwidth_gbs * 1e9), ""]
    report["load_after"] = os.getloadavg()
    report["minutes"] = (time.time() - started) / 60
    print("\n".join(lines))
    print(f"load average before {load_before}, after {report['load_after']}; "
          f"{report['minutes']:.1f} min")
    for problem in problems:
        print(f"!!! {problem}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
