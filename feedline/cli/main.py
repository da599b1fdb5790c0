"""``feedline`` command line: ``feedline demo`` runs a real pipeline on generated sample data;
``feedline snapshots PATH`` lists what ``snapshot(PATH)`` wrote; ``feedline profile
MODULE:FUNCTION`` measures a pipeline and names its bottleneck."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

_DESCRIPTION = ("feedline command line: 'feedline demo' runs a real pipeline on generated sample "
                "data; 'feedline snapshots PATH' lists the snapshots a snapshot(PATH) wrote; "
                "'feedline profile MODULE:FUNCTION' measures a pipeline and names its "
                "bottleneck.")
"""The ``--help`` text: plain words (the module docstring's markup shows as it is there)."""


def _demo(args: argparse.Namespace) -> int:
    if args.data_dir:
        return _run_demo(args, Path(args.data_dir))
    # Its sample data goes with it: a demo run again and again must not fill /tmp.
    with tempfile.TemporaryDirectory(prefix="feedline-demo-") as directory:
        code = _run_demo(args, Path(directory))
    print(f"removed the sample data in {directory} (--data-dir keeps it)")
    return code


def _run_demo(args: argparse.Namespace, directory: Path) -> int:
    import feedline as fl
    from feedline.demo import chess

    started = time.perf_counter()
    files = chess.write_records(directory, args.records, args.files)
    print(f"wrote {args.records} chess-position records (tf.train.Example) into "
          f"{len(files)} TFRecord files in {directory} ({time.perf_counter() - started:.1f} s)")

    def pipeline() -> fl.Dataset:
        return (fl.Dataset.list_files(str(directory / "*.tfrecord"), shuffle=True, seed=0)
                # Local files on few cores: reading inline beats reader threads that would
                # compete for the GIL; the parse + unpack map gets the threads instead.
                .interleave(fl.TFRecordDataset, cycle_length=4, block_length=16)
                .shuffle(10_000, seed=0)
                .batch(args.batch_size)
                .map(chess.transform, num_parallel_calls=fl.AUTOTUNE)
                .prefetch(fl.AUTOTUNE))

    print("pipeline: list_files -> interleave(TFRecordDataset, 4 files in turn) -> "
          f"shuffle(10000) -> batch({args.batch_size}) -> map(parse_example + unpack bits) "
          "-> prefetch")
    started = time.perf_counter()
    records = batches = 0
    first_batch = None
    with iter(pipeline()) as iterator:
        for batch in iterator:
            if first_batch is None:
                first_batch = time.perf_counter() - started
                shapes = {k: v.shape for k, v in batch.items()}
                print(f"first batch after {first_batch * 1000:.0f} ms: {shapes}")
            records += len(batch["score"])
            batches += 1
            if batches == 3:
                checkpoint = json.dumps(iterator.state_dict())
                expected_next = next(iterator)
                records += len(expected_next["score"])
                batches += 1
    elapsed = time.perf_counter() - started
    print(f"one epoch: {records} records in {batches} batches, {elapsed:.2f} s, "
          f"{records / elapsed:,.0f} records/s")

    with iter(pipeline()) as restored:
        restored.load_state_dict(json.loads(checkpoint))
        resumed = next(restored)
    same = all((resumed[k] == expected_next[k]).all() for k in resumed)
    print(f"checkpoint after batch 3: {len(checkpoint)} bytes of JSON; a new iterator restored "
          f"from it produced {'the same' if same else 'a DIFFERENT'} next batch")
    return 0 if same and records == args.records else 1


def _snapshots(args: argparse.Namespace) -> int:
    from feedline.snapshot.info import remove_partial, snapshot_info
    from feedline.snapshot.store import filesystem

    fs, inner = filesystem(args.path)
    if not fs.isdir(inner):
        what = "not a folder" if fs.exists(inner) else "no such folder"
        print(f"feedline snapshots: {args.path}: {what}", file=sys.stderr)
        return 1
    if args.remove_partial:
        for folder in remove_partial(args.path):
            print(f"removed {folder}")
    entries = snapshot_info(args.path)
    if not entries:
        print(f"no snapshot under {args.path}")
        return 0
    print(f"{'fingerprint':<18} {'status':<9} {'elements':>12} {'MB':>10} {'chunks':>7}  "
          "compression")
    for info in entries:
        print(f"{info.fingerprint:<18} {info.status:<9} {info.elements:>12,} "
              f"{info.bytes / 1e6:>10.1f} {info.chunks:>7}  {info.compression}")
    return 0


class _TargetError(Exception):
    """``MODULE:FUNCTION`` names no zero-argument function returning a Dataset."""


def _load_pipeline(target: str) -> Any:
    """The Dataset ``target`` (``module:function`` or ``path/to/file.py:function``) returns.

    Raises:
        _TargetError: The module, the function or its result is not what is needed.
    """
    import feedline as fl

    module_name, _, attribute = target.rpartition(":")
    if not module_name or not attribute:
        raise _TargetError(f"expected MODULE:FUNCTION (a module or a .py file, a colon, a "
                           f"function returning a Dataset), got {target!r}")
    if module_name.endswith(".py") or os.sep in module_name:
        module = _import_file(Path(module_name))
    else:
        # The installed command does not put the working folder on sys.path (python -m does):
        # `feedline profile pipelines:train` should find ./pipelines.py all the same.
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            # Only a missing target is a bad argument; a module the target imports that is
            # missing is the target's own error, and its traceback says where.
            if error.name is None or not (module_name == error.name
                                          or module_name.startswith(error.name + ".")):
                raise
            raise _TargetError(f"no module named {module_name!r} (give a module importable "
                               "from here, or the path of a .py file)") from None
    function: Any = module
    for part in attribute.split("."):
        if not hasattr(function, part):
            raise _TargetError(f"{module_name!r} has no {attribute!r}")
        function = getattr(function, part)
    if not callable(function):
        raise _TargetError(f"{target} is a {type(function).__name__}, not a function")
    try:
        inspect.signature(function).bind()
    except TypeError:
        raise _TargetError(f"{target} must take no arguments: it takes "
                           f"{inspect.signature(function)}") from None
    except ValueError:  # no signature to inspect (a builtin): calling it will tell
        pass
    dataset = function()
    if not isinstance(dataset, fl.Dataset):
        raise _TargetError(f"{target} returned a {type(dataset).__name__}, not a feedline "
                           "Dataset")
    return dataset


def _import_file(path: Path) -> ModuleType:
    """Import a .py file the way ``python path`` runs it: its folder first on ``sys.path``."""
    if not path.is_file():
        raise _TargetError(f"no such file: {path}")
    name = path.stem if path.stem.isidentifier() and path.stem not in sys.modules \
        else f"_feedline_profile_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise _TargetError(f"cannot import {path} as a Python module")
    sys.path.insert(0, str(path.resolve().parent))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    # Worker processes cannot import a file by path: its functions travel by value.
    import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    return module


def _profile(args: argparse.Namespace) -> int:
    try:
        dataset = _load_pipeline(args.target)
    except _TargetError as error:
        print(f"feedline profile: error: {error}", file=sys.stderr)
        return 2
    from feedline.profiling.html import write_html
    from feedline.profiling.records import to_json
    from feedline.profiling.report import format_report, profile
    from feedline.profiling.trace import write_chrome_trace

    rewrites = ", then each advised rewrite as long" if args.verify else ""
    print(f"profiling {args.target} for up to {args.seconds:g} s{rewrites}...", file=sys.stderr)
    report = profile(dataset, seconds=args.seconds, verify=args.verify,
                     trace=args.trace is not None)
    print(format_report(report))
    if args.html is not None:
        print(f"HTML report: {write_html(report, args.html)}")
    if args.trace is not None:
        path = write_chrome_trace(report.statistics, args.trace)
        print(f"trace: {path} (open it in ui.perfetto.dev or chrome://tracing)")
    if args.json is not None:
        path = Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(to_json(report), encoding="utf-8")
        print(f"JSON: {path}")
    return 0


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``feedline`` command.

    Example:
        >>> main(["demo", "--records", "2000", "--files", "2"])  # doctest: +SKIP
        0
        >>> main(["profile", "pipelines.py:train", "--html", "report.html"])  # doctest: +SKIP
        0
    """
    import feedline

    parser = argparse.ArgumentParser(prog="feedline", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {feedline.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run a real pipeline on generated sample data")
    demo.add_argument("--records", type=int, default=100_000, help="records to generate")
    demo.add_argument("--files", type=int, default=8, help="TFRecord files to spread them over")
    demo.add_argument("--batch-size", type=int, default=512)
    demo.add_argument("--data-dir", help="where to write the sample data (default: a temp dir)")
    demo.set_defaults(run=_demo)
    snapshots = commands.add_parser(
        "snapshots", help="list the snapshots under a snapshot(path) folder")
    snapshots.add_argument("path", help="the folder given to Dataset.snapshot")
    snapshots.add_argument("--remove-partial", action="store_true",
                           help="delete the partial writes no live process is writing")
    snapshots.set_defaults(run=_snapshots)
    profile = commands.add_parser(
        "profile", help="measure a pipeline: throughput, bottleneck, advice, HTML and trace",
        description="Run the Dataset that FUNCTION returns for up to --seconds with statistics "
                    "on, then print its throughput, whether a consumer would wait for it, the "
                    "stage that limits it and what to change.")
    profile.add_argument("target", metavar="MODULE:FUNCTION",
                         help="a zero-argument function returning a feedline Dataset, in an "
                              "importable module or a .py file (pipelines.py:train)")
    profile.add_argument("--seconds", type=_positive_seconds, default=5.0,
                         help="how long to read the pipeline (less if it ends; default 5)")
    profile.add_argument("--html", metavar="PATH", help="write a self-contained HTML report")
    profile.add_argument("--trace", metavar="PATH",
                         help="record spans and write a Chrome trace (Perfetto, chrome://tracing)")
    profile.add_argument("--json", metavar="PATH", help="write the report as JSON")
    profile.add_argument("--verify", action="store_true",
                         help="measure each advised rewrite too and report its real speed-up")
    profile.set_defaults(run=_profile)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
