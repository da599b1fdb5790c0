"""Train on a CUDA GPU with each loader: does the input pipeline keep the GPU busy?

``python -m benchmarks.gpu_feed [--small] [--loaders ...] [--workloads chess,images]``

For each workload a real model trains on the GPU, fed by each system's expert pipeline from
``benchmarks/systems/`` (the same code as ``./dev bench``):

- ``chess``: a small residual network (``ChessNet``: 6 residual blocks of 3x3 convolutions,
  128 channels) on the ``(8, 8, 24)`` float32 boards, predicting the score (MSE);
- ``images``: ResNet-18 (``torchvision.models.resnet18`` when torchvision is importable, else
  the same architecture defined here) on the ``224x224`` crops, 1000 classes, labels drawn on
  the GPU (the data set has none; the cost is the same).

Both train in bfloat16 autocast with SGD (momentum 0.9), channels-last. Measured per loader,
after ``--warmup-steps`` steps (cuDNN's autotuning and the loaders' start-up are not counted):

- examples/s over the timed steps (ended by the data or by ``--max-seconds``);
- the **limit**: the same model trained on one batch already on the GPU, over and over;
- the GPU's **wait fraction**: CUDA events recorded at the start (before the host-to-device
  copy) and end of every step; the gaps between one step's end and the next one's start on
  the GPU's own clock are time the GPU had nothing queued, over the span of all steps;
- the share of wall time the training loop spent blocked in ``next()``.

Loader ``feedline-gpu-decode`` (images only) is feedline's device image path: the pipeline reads
the files in threads and batches their encoded bytes with the crop/flip parameters; the
training process decodes each batch on the GPU (nvJPEG through ``torchvision.io.decode_jpeg``)
and crops, flips and normalizes it there (``feedline.image.device``), inside the timed step.

Every measurement runs in its own process (``--child``). The loaders must be importable in
the interpreter running this script, next to a CUDA build of PyTorch: feedline (this
repository, ``pip install -e .``), ``torch`` (DataLoader), and, if installed, ``tensorflow``
(tf.data) and ``grain``; others are reported as unavailable. DataLoader uses
``pin_memory=True`` (its idiom); other loaders' NumPy batches are copied with ``.to(device)``.

Without a CUDA GPU (or without PyTorch) it says so and exits with status 0: nothing is
measured, nothing is estimated.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import RunSpec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# Loader -> (system of benchmarks/systems, variant, module that must import).
LOADERS: dict[str, tuple[str, str, str]] = {
    "feedline": ("feedline", "recommended", "feedline"),
    "feedline-processes": ("feedline", "processes", "feedline"),
    "feedline-gpu-decode": ("feedline", "gpu-decode", "feedline"),
    "torch": ("torch", "expert", "torch"),
    "tf": ("tf", "expert", "tensorflow"),
    "grain": ("grain", "expert", "grain"),
}
WORKLOADS = ("chess", "images")
IMAGES_ONLY = ("feedline-gpu-decode",)  # loaders of the images workload alone


# ----------------------------------------------------------------------------- pure helpers
def cuda_problem() -> str | None:
    """Why this interpreter cannot train on a CUDA GPU, or ``None`` if it can."""
    try:
        import torch
    except ImportError:
        return f"PyTorch is not installed in {sys.executable}"
    if not torch.cuda.is_available():
        return (f"torch.cuda.is_available() is False (torch {torch.__version__}, CUDA build: "
                f"{torch.version.cuda or 'none'})")
    return None


def gpu_idle_fraction(starts_ms: list[float], ends_ms: list[float]) -> float | None:
    """Share of the span from the first start to the last end with no step on the GPU.

    ``starts_ms[i]``/``ends_ms[i]``: when the GPU reached step ``i``'s start and end events
    (milliseconds from any common origin). The gap between a step's end and the next
    step's start is time the GPU waited for the host to queue more work.

    Example:
        >>> round(gpu_idle_fraction([0, 10, 25], [8, 20, 30]), 4)  # (2 + 5) / 30
        0.2333
        >>> gpu_idle_fraction([0, 5], [5, 10])
        0.0
    """
    if not starts_ms or len(starts_ms) != len(ends_ms):
        return None
    span = ends_ms[-1] - starts_ms[0]
    if span <= 0:
        return None
    idle = sum(max(0.0, starts_ms[i + 1] - ends_ms[i]) for i in range(len(starts_ms) - 1))
    return idle / span


def inputs_and_targets(batch: Any, workload: str) -> tuple[Any, Any | None]:
    """The model's input and target as NumPy arrays or torch tensors (no copies).

    Chess batches are dicts (``board``, ``flags``, ``score``): input ``board``, target
    ``score``. Image batches are one array (any leaf type): input it, no target.

    Example:
        >>> import numpy as np
        >>> x, y = inputs_and_targets({"board": np.zeros((2, 8, 8, 24)), "score": np.ones(2),
        ...                            "flags": np.zeros((2, 10))}, "chess")
        >>> x.shape, y.tolist()
        ((2, 8, 8, 24), [1.0, 1.0])
    """
    if workload == "chess":
        return _plain(batch["board"]), _plain(batch["score"])
    if isinstance(batch, dict | list | tuple):
        raise TypeError(f"an images batch is one array, got {type(batch).__name__}")
    return _plain(batch), None


def _plain(leaf: Any) -> Any:
    """torch tensors as they are; TensorFlow tensors as NumPy; NumPy as is."""
    if type(leaf).__module__.startswith("torch"):
        return leaf
    if hasattr(leaf, "numpy"):
        return leaf.numpy()
    return leaf


def markdown(results: list[dict[str, Any]], device: str) -> str:
    """The results table of one invocation.

    Example:
        >>> print(markdown([{"workload": "chess", "loader": "limit", "ok": True,
        ...                  "throughput": 100.0},
        ...                 {"workload": "chess", "loader": "torch", "ok": True,
        ...                  "throughput": 80.0, "gpu_waited": 0.2, "next_waited": 0.1,
        ...                  "notes": "num_workers=4"}], "H100"))
        ### gpu_feed on H100
        <BLANKLINE>
        | workload | loader | examples/s | of limit | GPU waited | in next() | notes |
        |---|---|---|---|---|---|---|
        | chess | limit (one batch on the GPU) | 100 | 100% | – | – |  |
        | chess | torch | 80 | 80.0% | 20.0% | 10.0% | num_workers=4 |
    """
    lines = [f"### gpu_feed on {device}", "",
             "| workload | loader | examples/s | of limit | GPU waited | in next() | notes |",
             "|---|---|---|---|---|---|---|"]
    for workload in WORKLOADS:
        mine = [r for r in results if r["workload"] == workload]
        limit = next((r.get("throughput") for r in mine
                      if r["loader"] == "limit" and r.get("ok")), None)
        for r in mine:
            name = "limit (one batch on the GPU)" if r["loader"] == "limit" else r["loader"]
            if not r.get("ok"):
                lines.append(f"| {workload} | {name} | – | – | – | – | {r.get('error')} |")
                continue
            rate = r.get("throughput")
            share = "100%" if r["loader"] == "limit" else _pct(
                rate / limit if rate and limit else None)
            lines.append(f"| {workload} | {name} | {_num(rate)} | {share} "
                         f"| {_pct(r.get('gpu_waited'))} | {_pct(r.get('next_waited'))} "
                         f"| {r.get('notes', '')} |")
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


# ----------------------------------------------------------------------------- models
def chess_net(torch: Any, channels: int = 128, blocks: int = 6) -> Any:
    """A small residual network: ``(N, 24, 8, 8)`` boards to ``(N,)`` scores in (-1, 1)."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(channels)
            self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(channels)

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(x + self.bn2(self.conv2(y)))

    class ChessNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(24, channels, 3, padding=1, bias=False),
                                      nn.BatchNorm2d(channels), nn.ReLU())
            self.blocks = nn.Sequential(*[Block() for _ in range(blocks)])
            self.head = nn.Sequential(nn.Conv2d(channels, 32, 1), nn.ReLU(), nn.Flatten(),
                                      nn.Linear(32 * 64, 128), nn.ReLU(), nn.Linear(128, 1))

        def forward(self, x: Any) -> Any:
            return torch.tanh(self.head(self.blocks(self.stem(x)))).squeeze(1)

    return ChessNet()


def resnet18(torch: Any, num_classes: int = 1000) -> tuple[Any, str]:
    """ResNet-18: torchvision's if importable, else the same architecture defined here."""
    try:
        import torchvision

        return torchvision.models.resnet18(num_classes=num_classes), "torchvision resnet18"
    except ImportError:
        pass
    nn = torch.nn

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    layers: list[Any] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                         nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers), "ResNet-18 (own definition; torchvision not installed)"


class Trainer:
    """One model, its optimizer, and a ``step(x, y)`` that queues one training step."""

    def __init__(self, torch: Any, workload: str, device: Any) -> None:
        self.torch, self.workload, self.device = torch, workload, device
        if workload == "chess":
            model, self.model_name = chess_net(torch), "ChessNet (6 residual blocks, 128 ch)"
        else:
            model, self.model_name = resnet18(torch)
        self.model = model.to(device).to(memory_format=torch.channels_last)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def to_device(self, x: Any, y: Any | None) -> tuple[Any, Any]:
        torch = self.torch
        x = x if isinstance(x, torch.Tensor) else torch.from_numpy(x)
        x = x.to(self.device, non_blocking=x.is_pinned())
        # NHWC in memory, NCHW for the convolutions: a view, no copy.
        x = x.permute(0, 3, 1, 2)
        if y is None:
            y = torch.randint(0, 1000, (x.shape[0],), device=self.device)
        else:
            y = y if isinstance(y, torch.Tensor) else torch.from_numpy(y)
            y = y.to(self.device, non_blocking=y.is_pinned())
        return x, y

    def step(self, x: Any, y: Any) -> None:
        torch = self.torch
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            out = self.model(x)
            if self.workload == "chess":
                loss = torch.nn.functional.mse_loss(out.float(), y.float())
            else:
                loss = torch.nn.functional.cross_entropy(out.float(), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()


# ----------------------------------------------------------------------------- GPU decoding
def gpu_decode_pipeline(spec: RunSpec) -> Any:
    """The ``feedline-gpu-decode`` loader's pipeline: each image's file read in a threaded
    map, the encoded bytes batched with its crop offsets and flip (nothing decoded here)."""
    import numpy as np

    import feedline as fl
    from benchmarks import common

    files = np.array(spec.data["files"])
    params = common.image_params(spec.data)
    ds = fl.Dataset.from_tensor_slices((files, params[:, 0], params[:, 1], params[:, 2]))
    if spec.shuffle:
        ds = ds.shuffle(len(files), seed=spec.seed)
    ds = ds.map(lambda path, dy, dx, flip: (_read_bytes(path), dy, dx, flip),
                num_parallel_calls=fl.AUTOTUNE)
    return ds.batch(common.IMAGE_BATCH).prefetch(fl.AUTOTUNE)


def _read_bytes(path: Any) -> bytes:
    # A string element is bytes (as in tf.data) or a NumPy str.
    with open(path.decode() if isinstance(path, bytes) else str(path), "rb") as f:
        return f.read()


def gpu_decode_batch(batch: Any, device: Any) -> tuple[Any, None]:
    """Decode a ``(jpegs, dy, dx, flip)`` batch on ``device`` and do the images workload's
    augmentation there: the ``224x224`` crop at each ``(dy, dx)``, the flagged flips and
    ImageNet normalization, an NHWC float32 batch on the device (no target).

    Example (on the CPU, where the host decoder runs: the same pixels as feedline.image):
        >>> import numpy as np
        >>> import feedline.image as fli
        >>> jpegs = [fli.encode_jpeg(np.full((320, 320, 3), v, np.uint8)) for v in (10, 200)]
        >>> x, y = gpu_decode_batch((jpegs, np.array([0, 96]), np.array([5, 0]),
        ...                          np.array([1, 0])), "cpu")
        >>> tuple(x.shape), x.dtype, y
        ((2, 224, 224, 3), torch.float32, None)
        >>> from benchmarks import common
        >>> crop = fli.crop_to_bounding_box(fli.decode_jpeg(jpegs[1], 3), 96, 0, 224, 224)
        >>> bool((x[1].numpy() == fli.normalize(crop, common.IMAGENET_MEAN,
        ...                                     common.IMAGENET_STD)).all())
        True
    """
    import numpy as np

    from benchmarks import common
    from feedline.image import decode_jpeg_to_device
    from feedline.image import device as on_device

    jpegs, dy, dx, flip = batch
    images = decode_jpeg_to_device(jpegs, 3, device=device)
    crops = on_device.crop_to_bounding_box(images, dy, dx, common.CROP, common.CROP)
    crops = on_device.flip_left_right(crops, np.asarray(flip).astype(bool))
    return on_device.normalize(crops, common.IMAGENET_MEAN, common.IMAGENET_STD), None


# ----------------------------------------------------------------------------- child runs
def child(spec: RunSpec) -> dict[str, Any]:
    """One measurement in this process: the limit, or training fed by one loader."""
    import importlib

    import torch

    from benchmarks.systems import SYSTEMS

    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")
    trainer = Trainer(torch, spec.workload, device)
    warmup = int(spec.extra["warmup_steps"])
    max_seconds = float(spec.extra["max_seconds"])
    notes = trainer.model_name
    if spec.extra.get("limit"):
        batch = _first_batch(spec)
        x, y = trainer.to_device(*inputs_and_targets(batch, spec.workload))
        source: Any = iter(lambda: (x, y), None)  # the same batch, for ever
        system = iterable = None
    else:
        system = importlib.import_module(f"benchmarks.systems.{SYSTEMS[spec.system][0]}")
        system.prepare(spec)
        if spec.variant == "gpu-decode":
            iterable = gpu_decode_pipeline(spec)
            notes = f"threads read, nvJPEG decode + crop/flip/normalize on the GPU; {notes}"
        else:
            iterable = system.build(spec)
            notes = f"{system.notes(spec)}; {notes}"
        source = iter(iterable)
    on_device = spec.extra.get("limit", False)

    def prepare(item: Any) -> tuple[Any, Any]:
        if spec.variant == "gpu-decode":
            return gpu_decode_batch(item, device)
        return inputs_and_targets(item, spec.workload)

    starts: list[Any] = []
    ends: list[Any] = []
    steps = count = 0
    in_next = 0.0
    t0 = None
    try:
        while True:
            before = time.perf_counter()
            try:
                item = next(source)
            except StopIteration:
                break
            got = time.perf_counter()
            if on_device:
                x, y = item
            if steps == warmup:
                torch.cuda.synchronize()
                t0 = got = time.perf_counter()
            elif steps > warmup:
                in_next += got - before
            start, end = (torch.cuda.Event(enable_timing=True),
                          torch.cuda.Event(enable_timing=True))
            start.record()
            if not on_device:
                x, y = trainer.to_device(*prepare(item))
            trainer.step(x, y)
            end.record()
            if steps >= warmup:
                starts.append(start)
                ends.append(end)
                count += int(x.shape[0])
            steps += 1
            if t0 is not None and time.perf_counter() - t0 > max_seconds:
                break
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0 if t0 is not None else 0.0
    finally:
        if system is not None:
            close = getattr(source, "close", None)
            if close is not None:
                close()
            system.cleanup(iterable, source)
    if not starts or elapsed <= 0:
        raise RuntimeError(f"only {steps} steps: fewer than --warmup-steps {warmup} + 1")
    origin = starts[0]
    idle = gpu_idle_fraction([origin.elapsed_time(e) for e in starts],
                             [origin.elapsed_time(e) for e in ends])
    return {"throughput": count / elapsed, "steps": len(starts), "elements": count,
            "seconds": elapsed, "gpu_waited": None if on_device else idle,
            "gpu_idle_on_device": idle if on_device else None,
            "next_waited": None if on_device else in_next / elapsed, "notes": notes,
            "device": torch.cuda.get_device_name(0)}


def _first_batch(spec: RunSpec) -> Any:
    """One batch of the workload from NumPy, for the limit (no loader involved)."""
    from benchmarks import reference

    return next(reference.batches(spec.workload, spec.data, 1))


def run_child(spec: RunSpec, timeout: float) -> dict[str, Any]:
    """Run one measurement in a fresh process of this interpreter."""
    fd, out = tempfile.mkstemp(prefix="gpu-feed-", suffix=".json")
    os.close(fd)
    spec.out = out
    spec_path = out + ".spec"
    Path(spec_path).write_text(spec.to_json())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    try:
        done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_feed", "--child",
                               spec_path], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        try:
            with open(out) as f:
                return json.load(f)
        except (OSError, ValueError):
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return {"ok": False, "error": "crashed: " + " / ".join(tail)}
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timeout (> {timeout:.0f} s)"}
    finally:
        Path(out).unlink(missing_ok=True)
        Path(spec_path).unlink(missing_ok=True)


def _child_main(spec_path: str) -> int:
    spec = RunSpec.from_json(Path(spec_path).read_text())
    try:
        result = {"ok": True, **child(spec)}
    except BaseException as error:  # noqa: BLE001 - every failure is reported, none hidden
        import traceback

        result = {"ok": False, "error": f"{type(error).__name__}: {error}",
                  "traceback": traceback.format_exc()}
    with open(spec.out, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    os._exit(0 if result["ok"] else 1)


# ----------------------------------------------------------------------------- main
def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu_feed", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="the --small data sizes")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--loaders", default=",".join(LOADERS),
                        help="comma-separated (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                        help="worker processes of DataLoader, Grain's mp_prefetch and feedline's "
                             "multiprocess (default: all cores but one, %(default)s)")
    parser.add_argument("--chess-records", type=int,
                        help="default: 800,000 (issue 9's GPU runs; --small: 40,000)")
    parser.add_argument("--chess-files", type=int,
                        help="default: 32, so that up to 32 workers each read files "
                             "(--small: 8)")
    parser.add_argument("--images", type=int, dest="image_count")
    parser.add_argument("--warmup-steps", type=int, default=20)
    parser.add_argument("--max-seconds", type=float, default=30,
                        help="timed part of each run, at most (default %(default)s)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", default=str(HERE / ".cache" / "gpu_feed.json"))
    parser.add_argument("--child", metavar="SPEC", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    args.loaders = [name.strip() for name in args.loaders.split(",") if name.strip()]
    for w in args.workloads:
        if w not in WORKLOADS:
            parser.error(f"unknown workload {w!r}: expected any of {', '.join(WORKLOADS)}")
    for name in args.loaders:
        if name not in LOADERS:
            parser.error(f"unknown loader {name!r}: expected any of {', '.join(LOADERS)}")
    if args.warmup_steps < 0 or args.workers < 1:
        parser.error("--warmup-steps must be >= 0 and --workers >= 1")
    return args


def plan(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(workload, loader) pairs in order: the limit first, then each loader (an
    unavailable loader stays in the plan and is reported as such).

    Example:
        >>> plan(parse_args(["--loaders", "torch,tf", "--workloads", "chess"]))
        [('chess', 'limit'), ('chess', 'torch'), ('chess', 'tf')]
        >>> plan(parse_args(["--loaders", "feedline-gpu-decode"]))  # images only
        [('chess', 'limit'), ('images', 'limit'), ('images', 'feedline-gpu-decode')]
    """
    return [(w, name) for w in args.workloads for name in ["limit", *args.loaders]
            if name not in IMAGES_ONLY or w == "images"]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.child:
        return _child_main(args.child)
    problem = cuda_problem()
    if problem is not None:
        print(f"gpu_feed: no CUDA GPU to train on: {problem}. Nothing was measured. Run it "
              "on a machine with a CUDA GPU and a CUDA build of PyTorch (see the module's "
              "docstring).")
        return 0
    import dataclasses

    from benchmarks import data as data_mod
    from benchmarks import envs, feed

    sizes = (data_mod.Sizes.small() if args.small
             else data_mod.Sizes(chess_records=800_000, chess_files=32))
    overrides = {"chess_records": args.chess_records, "chess_files": args.chess_files,
                 "images": args.image_count}
    sizes = dataclasses.replace(sizes, **{k: v for k, v in overrides.items() if v is not None})
    described = {w: data_mod.describe(w, sizes, args.seed) for w in args.workloads}
    modules = {module for _, _, module in LOADERS.values()}
    importable = {m: envs.can_import(sys.executable, m) for m in modules}
    results = []
    for workload, loader in plan(args):
        record: dict[str, Any] = {"workload": workload, "loader": loader}
        if loader != "limit" and not importable[LOADERS[loader][2]]:
            record.update(ok=False, error=f"unavailable: {LOADERS[loader][2]} is not "
                                          f"importable in {sys.executable}")
            results.append(record)
            continue
        system, variant, _ = LOADERS.get(loader, ("feedline", "recommended", ""))
        meta = described[workload]
        # Enough epochs that --max-seconds, not the data, ends the run at ~the limit rate.
        limit = next((r.get("throughput") for r in results if r["workload"] == workload
                      and r["loader"] == "limit" and r.get("ok")), None)
        warm = args.warmup_steps * feed.BATCH[workload] / limit if limit else 0
        epochs = feed.epochs_for(meta["count"], limit, args.max_seconds + warm) if limit else 1
        spec = RunSpec(system, variant, workload, "measure",
                       feed.repeat_data(meta, epochs) if loader != "limit" else meta,
                       seed=args.seed,
                       extra={"workers": args.workers, "pin_memory": True,
                              "warmup_steps": args.warmup_steps,
                              "max_seconds": args.max_seconds, "limit": loader == "limit"})
        print(f"[gpu_feed] {workload}: {loader} ...", file=sys.stderr, flush=True)
        result = run_child(spec, args.timeout)
        record.update(result)
        record.pop("traceback", None)
        results.append(record)
    device = next((r["device"] for r in results if r.get("device")), "CUDA GPU")
    text = markdown(results, device)
    print(text)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "device": device,
                   "command": "python -m benchmarks.gpu_feed " + " ".join(argv),
                   "cpus": os.cpu_count(), "results": results}, f, indent=1)
    return 0 if all(r.get("ok") or str(r.get("error", "")).startswith("unavailable")
                    for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
